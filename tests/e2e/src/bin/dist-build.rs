//! Builds the host as the Dockerfile does, in full, ahead of the tests that
//! run it (the deploy and containment binaries), when that full build never
//! passed on this machine for this checkout's key ([`DistBuildKey`]).
//!
//!     dist-build --needed   # exit 0: the full build is needed; 1: it is not
//!     dist-build            # build (a no-op when not needed)
//!
//! `tests/run.sh` starts it in the background for a whole run on such a
//! machine: the whole-program LTO link runs on one core for minutes, and
//! the tests that need the binary, scheduled last, find it built instead
//! of waiting for it in a test slot while the other core idles. They run
//! the same build command in the same target directory, which cargo finds
//! fresh.

use std::process::ExitCode;

use e2e_tests::deploy::{DistBuildKey, build_as_the_dockerfile_does};

fn main() -> ExitCode {
    let key = match DistBuildKey::of_this_checkout() {
        Ok(key) => key,
        Err(err) => {
            eprintln!("dist-build: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let needed = key.needs_full_build() && !key.built_in_full_this_run();
    if std::env::args().nth(1).as_deref() == Some("--needed") {
        return if needed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    if !needed {
        println!(
            "dist-build: the full build passed here before for digest {}",
            key.digest
        );
        return ExitCode::SUCCESS;
    }
    match build_as_the_dockerfile_does() {
        Ok(binary) => {
            println!("dist-build: built {}", binary.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("dist-build: {err:#}");
            ExitCode::FAILURE
        }
    }
}
