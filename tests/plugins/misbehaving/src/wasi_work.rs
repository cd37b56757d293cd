//! Host work through WASI imports: asking the host for big random buffers,
//! keeping pollables alive in the host's resource table, and running a
//! sequence of WASI calls given in the annotation (`wasi-script:<ops>`).
//!
//! These call the raw WASI 0.2 imports (the `wasip2` crate), so every call
//! is one host call with exactly the arguments written here.

use std::hint::black_box;

use wasip2::clocks::monotonic_clock;
use wasip2::io::poll::{self, Pollable};
use wasip2::random::{insecure, insecure_seed, random};

/// The size of each `random-flood` request: 32 MiB (it fits the default
/// 64 MiB memory cap of the guest, so only a host limit can stop the loop).
pub const RANDOM_FLOOD_BYTES: u64 = 32 << 20;

/// The duration of each `pollable-flood` pollable: an hour (never ready).
pub const POLLABLE_FLOOD_NANOS: u64 = 3_600_000_000_000;

/// Asks the host for [`RANDOM_FLOOD_BYTES`] of random bytes, again and
/// again, forever (each buffer is dropped before the next request).
pub fn random_flood() -> ! {
    loop {
        let bytes = random::get_random_bytes(RANDOM_FLOOD_BYTES);
        black_box(&bytes);
    }
}

/// Subscribes to an hour-long duration again and again, keeping every
/// pollable: each is a live entry in the host's resource table.
pub fn pollable_flood() -> ! {
    let mut kept: Vec<Pollable> = Vec::new();
    loop {
        kept.push(monotonic_clock::subscribe_duration(POLLABLE_FLOOD_NANOS));
        black_box(&kept);
    }
}

/// One step of a `wasi-script`, repeated `times`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// What to call.
    pub op: Op,
    /// How often (`*N` in the script; 1 without it).
    pub times: u64,
}

/// The WASI calls a script can make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `random:<len>`: `get-random-bytes(len)`.
    Random(u64),
    /// `insecure:<len>`: `get-insecure-random-bytes(len)`.
    Insecure(u64),
    /// `u64`: `get-random-u64`.
    RandomU64,
    /// `seed`: `insecure-seed`.
    Seed,
    /// `now`: the monotonic and wall clocks.
    Now,
    /// `pollable:<nanos>`: `subscribe-duration(nanos)`, kept alive until the
    /// script ends (or `drop`).
    Pollable(u64),
    /// `poll`: `poll` over every kept pollable that is ready (those of
    /// duration 0); nothing when none is.
    Poll,
    /// `poll-repeat:<n>`: one `poll` whose list names the first kept ready
    /// pollable `n` times (nothing when none is kept).
    PollRepeat(u64),
    /// `drop`: drops every kept pollable.
    Drop,
    /// `env`: `get-environment`.
    Env,
    /// `stdout:<len>`: writes `len` bytes (one line) to stdout.
    Stdout(u64),
    /// `spin:<n>`: `n` iterations of a loop that calls nothing.
    Spin(u64),
}

/// Parses `op[:arg][*times]` steps separated by `,` (spaces ignored).
pub fn parse_script(script: &str) -> Result<Vec<Step>, String> {
    script
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse_step)
        .collect()
}

fn parse_step(step: &str) -> Result<Step, String> {
    let (call, times) = match step.split_once('*') {
        Some((call, times)) => (call, number(times)?),
        None => (step, 1),
    };
    let (name, arg) = match call.split_once(':') {
        Some((name, arg)) => (name, Some(number(arg)?)),
        None => (call, None),
    };
    let need = |arg: Option<u64>| arg.ok_or_else(|| format!("`{name}` needs `:<number>`"));
    let op = match name.trim() {
        "random" => Op::Random(need(arg)?),
        "insecure" => Op::Insecure(need(arg)?),
        "u64" => Op::RandomU64,
        "seed" => Op::Seed,
        "now" => Op::Now,
        "pollable" => Op::Pollable(need(arg)?),
        "poll" => Op::Poll,
        "poll-repeat" => Op::PollRepeat(need(arg)?),
        "drop" => Op::Drop,
        "env" => Op::Env,
        "stdout" => Op::Stdout(need(arg)?),
        "spin" => Op::Spin(need(arg)?),
        other => return Err(format!("unknown wasi-script op `{other}`")),
    };
    Ok(Step { op, times })
}

fn number(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

/// Runs `steps`; returns a one-line summary (calls made, bytes received).
pub fn run_script(steps: &[Step]) -> String {
    let mut kept: Vec<(Pollable, bool)> = Vec::new();
    let mut calls: u64 = 0;
    let mut bytes: u64 = 0;
    for step in steps {
        for _ in 0..step.times {
            calls += 1;
            match step.op {
                Op::Random(len) => bytes += black_box(random::get_random_bytes(len)).len() as u64,
                Op::Insecure(len) => {
                    bytes += black_box(insecure::get_insecure_random_bytes(len)).len() as u64
                }
                Op::RandomU64 => {
                    black_box(random::get_random_u64());
                }
                Op::Seed => {
                    black_box(insecure_seed::insecure_seed());
                }
                Op::Now => {
                    black_box(monotonic_clock::now());
                    black_box(wasip2::clocks::wall_clock::now());
                }
                Op::Pollable(nanos) => {
                    kept.push((monotonic_clock::subscribe_duration(nanos), nanos == 0))
                }
                Op::Poll => {
                    let ready: Vec<&Pollable> =
                        kept.iter().filter(|(_, r)| *r).map(|(p, _)| p).collect();
                    if !ready.is_empty() {
                        black_box(poll::poll(&ready));
                    }
                }
                Op::PollRepeat(n) => {
                    if let Some((first, _)) = kept.iter().find(|(_, ready)| *ready) {
                        let list = vec![first; usize::try_from(n).unwrap_or(usize::MAX)];
                        black_box(poll::poll(&list));
                    }
                }
                Op::Drop => kept.clear(),
                Op::Env => {
                    black_box(wasip2::cli::environment::get_environment());
                }
                Op::Stdout(len) => {
                    println!("{}", "x".repeat(usize::try_from(len).unwrap_or(usize::MAX)))
                }
                Op::Spin(n) => {
                    let mut counter: u64 = 0;
                    for _ in 0..n {
                        counter = black_box(counter.wrapping_add(1));
                    }
                }
            }
        }
    }
    format!(
        "wasi-script: {calls} calls, {bytes} random bytes, {} pollables kept",
        kept.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse() {
        assert_eq!(
            parse_script("random:16*3, pollable:0,poll,drop,u64"),
            Ok(vec![
                Step {
                    op: Op::Random(16),
                    times: 3
                },
                Step {
                    op: Op::Pollable(0),
                    times: 1
                },
                Step {
                    op: Op::Poll,
                    times: 1
                },
                Step {
                    op: Op::Drop,
                    times: 1
                },
                Step {
                    op: Op::RandomU64,
                    times: 1
                },
            ])
        );
        assert_eq!(
            parse_script("poll-repeat:4000"),
            Ok(vec![Step {
                op: Op::PollRepeat(4000),
                times: 1
            }])
        );
        assert!(parse_script("random").is_err());
        assert!(parse_script("dance:1").is_err());
        assert!(parse_script("random:x").is_err());
    }
}
