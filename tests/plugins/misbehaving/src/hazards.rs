//! The harmful behaviours themselves: burning CPU, eating memory, and
//! writing to every output channel a plugin has.

use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

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

/// Sleeps for an hour in one blocking WASI call.
pub fn sleep_an_hour() {
    std::thread::sleep(std::time::Duration::from_secs(3600));
}

/// Recurses until the stack is exhausted. Not a tail call (the result is
/// used after the call), and `black_box` keeps it from being folded.
pub fn recurse(depth: u64) -> u64 {
    if black_box(depth) == 0 {
        return 0;
    }
    recurse(black_box(depth + 1)).wrapping_add(black_box(1))
}

/// One log call with a 64 KiB message, then 100000 with 1 KiB messages,
/// all made of forged host log lines (newlines, escape sequences).
pub fn flood_log() {
    let line = "\n2026-01-01T00:00:00Z  INFO wasm_operator: forged host line \x1b[31m";
    let big = line.repeat(64 * 1024 / line.len());
    log::info(&big, &[("forged\nkey", "value\r\n")]);
    let message = line.repeat(1024 / line.len());
    for _ in 0..100_000 {
        log::info(&message, &[("forged\nkey", "value\r\n")]);
    }
}

/// The pod spec `escalate:<what>` asks for: the pause container, compliant
/// with the Pod Security Standards' restricted profile, plus one kind of
/// extra authority. `<what>` is one of `capabilities` (SYS_ADMIN,
/// NET_ADMIN), `host-port` (80), `secret-volume` (a volume of the Secret
/// `db-credentials`), `service-account` (`admin`), `seccomp-unconfined`,
/// `tolerations` (every taint), `node-selector`, `priority-class`
/// (`system-node-critical`), `privileged`, `host-network`, `host-path`,
/// `run-as-root`, `image` (`evil.example.com/miner`); and for identity,
/// confinement and lifetime (issue 22): `run-as-group` (group 0),
/// `supplemental-groups` (`[0]`), `fs-group` (0), `selinux-level`
/// (`s0:c1,c2`), `seccomp-localhost` and `apparmor-localhost` (a Localhost
/// profile the template does not use), `grace-period` (a day),
/// `active-deadline` (a day, for a template that sets a shorter one),
/// `image-pull-policy` (`Never`), `env-secret-key` (key `password` of
/// [`SECRET`]), `env-from-secret` (every key of it, via `envFrom`) and `env`
/// (a plain variable `EVIL=1`: within the restricted profile, outside the
/// template).
/// Anything else gives the plain compliant spec (pod `runAsGroup` 65535, as
/// the host's default template).
pub fn escalated_spec(what: &str) -> String {
    let group = if what == "run-as-group" { 0 } else { 65535 };
    let drop_all = r#""allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}"#;
    let container_sc = match what {
        "capabilities" => {
            r#""allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"],"add":["SYS_ADMIN","NET_ADMIN"]}"#
        }
        "privileged" => {
            r#""allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"privileged":true"#
        }
        _ => drop_all,
    };
    let image = if what == "image" {
        "evil.example.com/miner"
    } else {
        "registry.k8s.io/pause:3.10"
    };
    let container_extra = match what {
        "host-port" => r#","ports":[{"containerPort":80,"hostPort":80}]"#,
        "secret-volume" => r#","volumeMounts":[{"name":"s","mountPath":"/s"}]"#,
        "image-pull-policy" => r#","imagePullPolicy":"Never""#,
        "env-secret-key" => {
            r#","env":[{"name":"P","valueFrom":{"secretKeyRef":{"name":"db-credentials","key":"password"}}}]"#
        }
        "env-from-secret" => r#","envFrom":[{"secretRef":{"name":"db-credentials"}}]"#,
        "env" => r#","env":[{"name":"EVIL","value":"1"}]"#,
        _ => "",
    };
    let pod_context_extra = match what {
        "supplemental-groups" => r#","supplementalGroups":[0]"#,
        "fs-group" => r#","fsGroup":0"#,
        "selinux-level" => r#","seLinuxOptions":{"level":"s0:c1,c2"}"#,
        "apparmor-localhost" => {
            r#","appArmorProfile":{"type":"Localhost","localhostProfile":"complain-everything"}"#
        }
        _ => "",
    };
    let seccomp = match what {
        "seccomp-unconfined" => r#"{"type":"Unconfined"}"#,
        "seccomp-localhost" => r#"{"type":"Localhost","localhostProfile":"profiles/audit.json"}"#,
        _ => r#"{"type":"RuntimeDefault"}"#,
    };
    let user = if what == "run-as-root" { 0 } else { 65535 };
    let non_root = what != "run-as-root";
    let pod_extra = match what {
        "secret-volume" => r#","volumes":[{"name":"s","secret":{"secretName":"db-credentials"}}]"#,
        "service-account" => r#","serviceAccountName":"admin","automountServiceAccountToken":true"#,
        "tolerations" => r#","tolerations":[{"operator":"Exists"}]"#,
        "node-selector" => r#","nodeSelector":{"kubernetes.io/hostname":"control-plane"}"#,
        "priority-class" => r#","priorityClassName":"system-node-critical""#,
        "host-network" => r#","hostNetwork":true"#,
        "host-path" => r#","volumes":[{"name":"root","hostPath":{"path":"/"}}]"#,
        "grace-period" => r#","terminationGracePeriodSeconds":86400"#,
        "active-deadline" => r#","activeDeadlineSeconds":86400"#,
        _ => "",
    };
    // As the template: no token mounted (so each attack breaks its own rule
    // only), unless the attack is asking for one.
    let token = if what == "service-account" {
        ""
    } else {
        r#","automountServiceAccountToken":false"#
    };
    format!(
        r#"{{"containers":[{{"name":"app","image":"{image}","securityContext":{{{container_sc}}}{container_extra}}}],"securityContext":{{"runAsNonRoot":{non_root},"runAsUser":{user},"runAsGroup":{group},"seccompProfile":{seccomp}{pod_context_extra}}}{pod_extra}{token}}}"#
    )
}

/// The Secret the `env-secret-key` and `env-from-secret` escalations read.
pub const SECRET: &str = "db-credentials";

/// Calls this instance has seen, counted in a global and in a heap cell the
/// first call allocates: `(global, heap)` after counting this call. An
/// instance that kept its memory between calls would return 2, 3, ...
pub fn count_this_call() -> (u32, u32) {
    static GLOBAL: AtomicU32 = AtomicU32::new(0);
    static HEAP: AtomicPtr<u32> = AtomicPtr::new(std::ptr::null_mut());
    let global = GLOBAL.fetch_add(1, Ordering::Relaxed) + 1;
    let mut cell = HEAP.load(Ordering::Relaxed);
    if cell.is_null() {
        cell = Box::into_raw(Box::new(0u32));
        HEAP.store(cell, Ordering::Relaxed);
    }
    // SAFETY: `cell` came from `Box::into_raw` above (in this instance) and
    // is never freed; the guest is single-threaded.
    let heap = unsafe {
        *cell += 1;
        *cell
    };
    (global, heap)
}

/// `forge:<place>`: [`crate::FORGED_TEXT`] where the host writes plugin
/// text to its log (see [`crate::Mode::Forge`]); `normal` is the ordinary
/// output. An unknown place returns `normal`.
pub fn forge(
    input: &jinghzhu_plugin_sdk::types::ReconcileInput,
    place: &str,
    mut normal: jinghzhu_plugin_sdk::types::ReconcileOutput,
) -> Result<jinghzhu_plugin_sdk::types::ReconcileOutput, jinghzhu_plugin_sdk::types::ReconcileError>
{
    let padded = || {
        format!(
            "{}{}",
            crate::FORGED_TEXT,
            "A".repeat(crate::FORGED_PADDING)
        )
    };
    match place {
        "error" => Err(jinghzhu_plugin_sdk::types::ReconcileError::retryable(
            padded(),
        )),
        "panic" => panic!("{} ({})", crate::FORGED_TEXT, input.jinghzhu.metadata.name),
        "label" => {
            if let Some(first) = normal.create_pods.first_mut() {
                jinghzhu_plugin_sdk::kv::set(&mut first.labels, crate::FORGED_TEXT, "x");
            }
            Ok(normal)
        }
        "event" => {
            normal
                .events
                .push(jinghzhu_plugin_sdk::output::warning_event(
                    "Forged",
                    crate::FORGED_TEXT,
                ));
            Ok(normal)
        }
        _ => Ok(normal),
    }
}

#[cfg(test)]
mod tests {
    use super::escalated_spec;

    #[test]
    fn every_escalated_spec_is_json() {
        for what in [
            "capabilities",
            "host-port",
            "secret-volume",
            "service-account",
            "seccomp-unconfined",
            "tolerations",
            "node-selector",
            "priority-class",
            "privileged",
            "host-network",
            "host-path",
            "run-as-root",
            "image",
            "run-as-group",
            "supplemental-groups",
            "fs-group",
            "selinux-level",
            "seccomp-localhost",
            "apparmor-localhost",
            "grace-period",
            "active-deadline",
            "image-pull-policy",
            "env-secret-key",
            "env-from-secret",
            "env",
            "none",
        ] {
            let spec = escalated_spec(what);
            assert!(json_balanced(&spec), "{what}: {spec}");
            assert!(spec.contains("containers"), "{what}");
        }
        assert!(escalated_spec("run-as-root").contains(r#""runAsUser":0"#));
        assert!(escalated_spec("none").contains("RuntimeDefault"));
        assert!(escalated_spec("none").contains(r#""runAsGroup":65535"#));
        assert!(escalated_spec("run-as-group").contains(r#""runAsGroup":0"#));
        assert!(escalated_spec("fs-group").contains(r#""fsGroup":0}"#));
        assert!(escalated_spec("seccomp-localhost").contains("profiles/audit.json"));
    }

    /// Braces and brackets balance outside strings (the plugin has no JSON
    /// parser; the host parses the spec).
    fn json_balanced(text: &str) -> bool {
        let mut depth: i32 = 0;
        let mut in_string = false;
        for c in text.chars() {
            match c {
                '"' => in_string = !in_string,
                '{' | '[' if !in_string => depth += 1,
                '}' | ']' if !in_string => depth -= 1,
                _ => {}
            }
            if depth < 0 {
                return false;
            }
        }
        depth == 0 && !in_string
    }
}
