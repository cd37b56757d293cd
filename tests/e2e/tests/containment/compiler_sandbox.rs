//! Containment, round two (issue 22), hazard 8: the child compiler gets
//! less than the host, and what it returns is checked before it is signed.
//! A compiler whose output is garbage (as a subverted one's could be) gets
//! the new plugin refused with a `PluginRefused` Warning naming
//! `limits/compile-output`; the old plugin keeps serving and nothing is
//! stored in the precompiled cache.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compiler_returning_garbage_gets_the_plugin_refused_and_nothing_signed()
-> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    use std::os::unix::fs::PermissionsExt;
    use wasm_operator::runtime::ChildCompiler;

    let env = TestEnv::new("compile-output").await?;
    let (v1, v2, cache) = v1_precompiled()?;
    let cwasm = |dir: &std::path::Path| -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
            .count())
    };
    let stored_before = cwasm(cache.path())?;

    // A "compiler" that reads the component and answers with garbage.
    let scripts = tempfile::tempdir()?;
    let program = scripts.path().join("tampering-compiler");
    std::fs::write(
        &program,
        "#!/bin/sh\ncat >/dev/null\nprintf 'native code of my choosing'\n",
    )?;
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))?;

    let maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let apply = PatchParams::apply("e2e").force();
    maps.patch(
        "plugin",
        &apply,
        &Patch::Apply(&e2e_tests::plugin_configmap("plugin", v1.clone())),
    )
    .await?;
    let host = host_compiling_in_a_child(
        &env,
        ChildCompiler {
            program,
            timeout: Duration::from_secs(60),
            memory_limit_bytes: 1 << 30,
        },
        cache.path(),
    )
    .await?;
    env.create("before", 1, &[]).await?;
    env.wait_converged("before", 1, CONVERGE).await?;

    maps.patch(
        "plugin",
        &apply,
        &Patch::Apply(&e2e_tests::plugin_configmap("plugin", v2.clone())),
    )
    .await?;
    let rule = "limits/compile-output";
    e2e_tests::wait_for(
        &format!("a PluginRefused Warning naming {rule}"),
        Duration::from_secs(60),
        || async { Ok(plugin_refusals(&env, rule).await? > 0) },
    )
    .await?;
    assert_eq!(host.metrics.plugin_swaps.get(), 0, "no swap");
    assert!(
        !host.plugin.current().info().version.ends_with("+v2"),
        "v1 still serves"
    );
    assert_eq!(cwasm(cache.path())?, stored_before, "nothing was signed");
    env.create("after", 2, &[]).await?;
    env.wait_converged("after", 2, CONVERGE).await?;
    env.scale("before", 2).await?;
    env.wait_converged("before", 2, CONVERGE).await?;
    host.stop().await;
    Ok(())
}
