//! The harmful behaviours themselves: burning CPU, eating memory, and
//! writing to every output channel a plugin has.

use std::hint::black_box;

use jinghzhu_plugin_sdk::log;

/// The size of one `hog` allocation.
pub const HOG_CHUNK: usize = 1 << 20;

/// Loops forever. `black_box` keeps the optimiser from proving the loop
/// has no effect.
pub fn spin_forever() -> ! {
    let mut counter: u64 = 0;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocates 1 MiB chunks forever, writing to every page of each so the
/// memory is really used, and keeping them all alive. Ends only when the
/// allocator fails (which aborts, i.e. traps) or the host stops it.
pub fn hog_memory_forever() -> ! {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0_u8; HOG_CHUNK];
        for byte in chunk.iter_mut().step_by(4096) {
            *byte = 0xA5;
        }
        kept.push(black_box(chunk));
        black_box(&kept);
    }
}

/// Writes the `log` mode's five log lines, a stdout line and a stderr line.
pub fn chatter(jinghzhu: &str) {
    let levels = [
        log::Level::Info,
        log::Level::Info,
        log::Level::Info,
        log::Level::Warn,
        log::Level::Error,
    ];
    for (i, level) in levels.into_iter().enumerate() {
        let line = (i + 1).to_string();
        log::log(
            level,
            &format!("misbehaving plugin log line {line} of {}", levels.len()),
            &[
                ("misbehave", "log"),
                ("line", &line),
                ("jinghzhu", jinghzhu),
            ],
        );
    }
    println!("misbehaving plugin: a line on stdout for {jinghzhu}");
    eprintln!("misbehaving plugin: a line on stderr for {jinghzhu}");
}

/// What the plugin can reach from inside its sandbox, as one line:
/// `env=<count> args=<count> fs_root=… fs_cwd=… fs_create=… tcp=…`, where
/// each `fs_*`/`tcp` is `allowed` or `denied(<error kind>)`. The host grants
/// none of them, so the expected report is `env=0 args=0` and `denied` for
/// the rest.
pub fn probe_sandbox() -> String {
    fn outcome<T>(result: std::io::Result<T>) -> String {
        match result {
            Ok(_) => "allowed".to_owned(),
            Err(err) => format!("denied({:?})", err.kind()),
        }
    }
    let env = std::env::vars_os().count();
    let args = std::env::args_os().count();
    let fs_root = outcome(std::fs::read_dir("/"));
    let fs_cwd = outcome(std::fs::read_dir("."));
    let fs_create = outcome(std::fs::File::create("sandbox-probe.txt"));
    let tcp = outcome(std::net::TcpStream::connect("127.0.0.1:80"));
    format!(
        "env={env} args={args} fs_root={fs_root} fs_cwd={fs_cwd} fs_create={fs_create} tcp={tcp}"
    )
}
