//! The test process's own memory, for tests whose host runs in process
//! ([`crate::RunningHost`]): its resident set and peak from
//! `/proc/self/status`, and a way to run one test alone in a child process so
//! that no other test's allocations count in what it measures.

/// Set in the child process a test runs alone in.
const ALONE: &str = "WASM_OPERATOR_E2E_ALONE";

/// Runs the test at `path` (`module::name` in this test binary) alone in a
/// child process of the binary, with one test thread, and returns how that
/// went; `None` when this process already is that child (the test then
/// does its work).
pub fn run_alone(path: &str) -> Option<anyhow::Result<()>> {
    if std::env::var_os(ALONE).is_some() {
        return None;
    }
    let run = || -> anyhow::Result<()> {
        let status = std::process::Command::new(std::env::current_exe()?)
            .args([path, "--exact", "--nocapture", "--test-threads=1"])
            .env(ALONE, "1")
            .status()?;
        anyhow::ensure!(status.success(), "{path}, run alone, failed: {status}");
        Ok(())
    };
    Some(run())
}

/// A `/proc/self/status` field given in kB (`VmRSS`, `VmHWM`), in bytes.
pub fn status_bytes(field: &str) -> anyhow::Result<u64> {
    crate::watched_host::proc_status_bytes(std::process::id(), field)
        .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/self/status"))
}

/// Resident set size of this process, in bytes.
pub fn rss() -> anyhow::Result<u64> {
    status_bytes("VmRSS")
}

/// The highest resident set size since the last [`reset_peak`], in bytes.
pub fn peak_rss() -> anyhow::Result<u64> {
    Ok(status_bytes("VmHWM")?.max(rss()?))
}

/// Starts a new peak (`VmHWM`) from the current RSS (`clear_refs` 5, Linux ≥ 4.0).
pub fn reset_peak() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5")
        .map_err(|err| anyhow::anyhow!("cannot reset the peak RSS: {err}"))
}

/// Bytes as MiB, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}
