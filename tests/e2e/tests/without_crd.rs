//! A cluster without the Jinghzhu CRD: the host refuses to start and says
//! how to install it. Its own test binary, so its control plane never gets
//! the CRD that the other suites install.

use local_control_plane::ControlPlane;

#[tokio::test]
async fn a_missing_crd_is_a_clear_error_that_names_the_fix() -> anyhow::Result<()> {
    let client = ControlPlane::shared()?.client().await?;
    let err = wasm_operator::run::check_crd(&client)
        .await
        .expect_err("no CRD is installed in this control plane");
    let message = format!("{err:#}");
    assert!(
        message.contains("the Jinghzhu CRD is not installed")
            && message.contains("wasm-operator crd | kubectl apply -f -"),
        "{message}"
    );
    Ok(())
}
