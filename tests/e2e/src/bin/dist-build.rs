//! Builds the host as the Dockerfile does ([`build_as_the_dockerfile_does`]:
//! in full where that never passed for this checkout's key
//! ([`DistBuildKey`]), else with the cheaper profile overrides), ahead of
//! the tests that run it (the deploy and containment binaries); first the
//! host of the commit the rolling-update test upgrades from
//! ([`build_previous_host`], once per machine and commit), which shares the
//! cheaper build's target directory.
//!
//!     dist-build            # build
//!     dist-build --record   # write this key's digest to the repository's
//!                           # record, once the full build passed here
//!
//! `tests/run.sh` starts it in the background for a whole run: a full
//! build's whole-program LTO link runs on one core for minutes, and even
//! the cheaper build compiles every dependency on a fresh machine (202 s
//! here). The tests that need the binary, scheduled last, find it built
//! instead of building it in a test slot. They run the same build command
//! in the same target directory, which cargo finds fresh.

use std::process::ExitCode;

use e2e_tests::deploy::{DIST_BUILD_RECORD, DistBuildKey, build_as_the_dockerfile_does};
use e2e_tests::previous_host::build_previous_host;

fn main() -> ExitCode {
    let key = match DistBuildKey::of_this_checkout() {
        Ok(key) => key,
        Err(err) => {
            eprintln!("dist-build: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = match std::env::args().nth(1).as_deref() {
        Some("--record") => record(&key),
        None => build(&key),
        Some(other) => Err(anyhow::anyhow!(
            "unknown argument {other:?}: run `dist-build` to build or `dist-build --record`"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("dist-build: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn record(key: &DistBuildKey) -> anyhow::Result<()> {
    if key.record_in_repository()? {
        println!(
            "dist-build: recorded digest {} in {DIST_BUILD_RECORD}: commit it",
            key.digest
        );
    } else {
        println!(
            "dist-build: {DIST_BUILD_RECORD} already records digest {}",
            key.digest
        );
    }
    Ok(())
}

fn build(key: &DistBuildKey) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // Before this checkout's build: building another tree in the shared
    // target directory makes the next build of this one recompile the
    // workspace's crates, which a build after it would then redo.
    let previous = build_previous_host()?;
    println!("dist-build: the previous host is {}", previous.display());
    let binary = build_as_the_dockerfile_does(key)?;
    // Its own time: tests/run.sh waits for it only once the tests ended.
    println!(
        "dist-build: built {} ({:.0} s in all)",
        binary.display(),
        started.elapsed().as_secs_f64()
    );
    if key.passed_here() && !key.is_recorded() {
        println!(
            "dist-build: the full build passed here for digest {}, which {DIST_BUILD_RECORD} \
             does not list: a fresh machine builds it in full until it does. Record it with \
             `cargo run -p e2e-tests --bin dist-build -- --record` and commit the file",
            key.digest
        );
    }
    Ok(())
}
