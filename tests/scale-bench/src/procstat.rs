//! What a controller process costs, read from `/proc/<pid>`: CPU time
//! (`stat`: utime + stime) and memory (`status`: `VmRSS` now, `VmHWM` the
//! peak so far), and the machine's load average for the report.

use std::collections::BTreeMap;
use std::fs;

use anyhow::{Context, Result, anyhow};

/// CPU seconds (user + system) the process has used so far.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (has the process exited?)"))?;
    parse_cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / clock_ticks_per_second())
        .ok_or_else(|| anyhow!("unexpected /proc/{pid}/stat format: {stat}"))
}

/// CPU seconds so far of each named process, processes of one name added up
/// (those that have exited are left out).
pub fn cpu_seconds_by_name(processes: &[(String, u32)]) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    for (name, pid) in processes {
        if let Ok(seconds) = cpu_seconds(*pid) {
            *by_name.entry(name.clone()).or_insert(0.0) += seconds;
        }
    }
    by_name
}

/// `after - before` for each process in both.
pub fn cpu_difference(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(name, a)| Some((name.clone(), a - before.get(name)?)))
        .collect()
}

/// utime + stime in clock ticks: fields 14 and 15 of `stat`, counted after
/// the parenthesised command name (which may itself contain spaces).
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// Resident memory now and its peak so far, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Memory {
    /// `VmRSS`.
    pub rss: u64,
    /// `VmHWM` (high-water mark of the resident set).
    pub peak: u64,
    /// `RssAnon`: the heap, stacks and other private memory.
    pub anon: u64,
    /// `RssFile`: pages of mapped files, mostly the executable's own code.
    pub file: u64,
}

/// The process's [`Memory`].
pub fn memory(pid: u32) -> Result<Memory> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (has the process exited?)"))?;
    parse_memory(&status).ok_or_else(|| anyhow!("no VmRSS/VmHWM in /proc/{pid}/status"))
}

fn parse_memory(status: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    };
    Some(Memory {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
        anon: field("RssAnon:").unwrap_or(0),
        file: field("RssFile:").unwrap_or(0),
    })
}

/// The 1-minute load average and the number of CPUs, e.g. `(1.73, 2)`.
pub fn load() -> (f64, usize) {
    let one_minute = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    (one_minute, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let stat =
            "1234 (my proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 4 0 100 1000 10";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
    }

    #[test]
    fn parses_status_memory() {
        let status = "Name:\tx\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\n\
                      RssAnon:\t    768 kB\nRssFile:\t    256 kB\n";
        assert_eq!(
            parse_memory(status),
            Some(Memory {
                rss: 1024 * 1024,
                peak: 2048 * 1024,
                anon: 768 * 1024,
                file: 256 * 1024,
            })
        );
    }

    #[test]
    fn cpu_differences_keep_processes_seen_twice() {
        let before = BTreeMap::from([("etcd".to_owned(), 1.0), ("kwok".to_owned(), 2.0)]);
        let after = BTreeMap::from([("etcd".to_owned(), 3.5), ("kube-apiserver".to_owned(), 9.0)]);
        assert_eq!(
            cpu_difference(&before, &after),
            BTreeMap::from([("etcd".to_owned(), 2.5)])
        );
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        let mem = memory(pid).expect("memory");
        assert!(mem.rss > 0 && mem.peak >= mem.rss);
        assert!(mem.anon > 0 && mem.file > 0 && mem.anon + mem.file <= mem.rss);
        // Burn a little CPU so the counter moves off zero.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_seconds(pid).expect("cpu") > 0.0);
    }
}
