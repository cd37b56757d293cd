//! `docs/flags.md` is rendered from the clap definition of the
//! `wasm-operator` command line: every visible subcommand, every flag with
//! its help, default, accepted values and environment variable. This test
//! renders it again and fails when the committed file differs;
//! `UPDATE_FLAGS_DOC=1` rewrites the file instead.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Arg, ArgAction, Command, CommandFactory};
use wasm_operator::cli::Cli;

const UPDATE_ENV: &str = "UPDATE_FLAGS_DOC";

fn flags_doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/flags.md")
}

/// A help text on one line of a table cell: blank lines and line breaks
/// become spaces, `|` is escaped, and `<`/`>` outside `code` too (Markdown
/// would take `<case>` for an HTML tag).
fn cell(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '|' => out.push_str("\\|"),
            '<' if !in_code => out.push_str("&lt;"),
            '>' if !in_code => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

fn help_of(arg: &Arg) -> String {
    arg.get_long_help()
        .or_else(|| arg.get_help())
        .map(|help| cell(&help.to_string()))
        .unwrap_or_default()
}

/// How the flag is written: `--name VALUE` (or `-n, --name VALUE`), or the
/// positional `NAME`.
fn usage_of(arg: &Arg) -> String {
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|name| name.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    match (arg.get_long(), arg.get_short()) {
        (None, None) => format!("`{value}`"),
        (long, short) => {
            let mut written = Vec::new();
            if let Some(short) = short {
                written.push(format!("-{short}"));
            }
            if let Some(long) = long {
                written.push(format!("--{long}"));
            }
            let mut usage = written.join(", ");
            if takes_value {
                usage.push_str(&format!(" {value}"));
            }
            format!("`{usage}`")
        }
    }
}

/// Default, accepted values and requirement, as one cell.
fn values_of(arg: &Arg) -> String {
    let mut parts = Vec::new();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() {
        parts.push(format!("default `{}`", defaults.join(",")));
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| format!("`{}`", value.get_name()))
        .collect();
    if !possible.is_empty() && matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        parts.push(format!("one of {}", possible.join(", ")));
    }
    if arg.is_required_set() {
        parts.push("required".to_string());
    }
    parts.join("; ")
}

fn env_of(arg: &Arg) -> String {
    arg.get_env()
        .map(|env| format!("`{}`", env.to_string_lossy()))
        .unwrap_or_default()
}

/// The table of `command`'s flags; the global ones only where
/// `with_global` (they are listed once, at the top).
fn render_args(out: &mut String, command: &Command, with_global: bool) {
    let args: Vec<&Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter(|arg| with_global || !arg.is_global_set())
        .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version"))
        .collect();
    if args.is_empty() {
        out.push_str("No flags of its own.\n\n");
        return;
    }
    out.push_str("| Flag | Environment | Default, values | What it does |\n");
    out.push_str("| --- | --- | --- | --- |\n");
    for arg in args {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            usage_of(arg),
            env_of(arg),
            values_of(arg),
            help_of(arg)
        );
    }
    out.push('\n');
}

/// The whole reference, as committed in `docs/flags.md`.
fn render() -> String {
    let mut root = Cli::command();
    root.build();
    let mut out = String::new();
    out.push_str("# Flags reference\n\n");
    out.push_str(
        "Generated from the `wasm-operator` command line's clap definition by \
         `host/tests/flags_doc.rs`; do not edit by hand. After changing a flag, run\n\
         `UPDATE_FLAGS_DOC=1 cargo test -p wasm-operator --test flags_doc` and commit the result.\n\
         A flag on the command line wins over its environment variable.\n\n",
    );
    if let Some(about) = root.get_about() {
        let _ = writeln!(out, "{}\n", cell(&about.to_string()));
    }
    out.push_str("## Global flags\n\nAccepted by every subcommand.\n\n");
    render_args(&mut out, &root, true);
    let subcommands: Vec<&Command> = root
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
        .collect();
    out.push_str("## Subcommands\n\n");
    for sub in &subcommands {
        let about = sub
            .get_about()
            .map(|a| cell(&a.to_string()))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "- [`{0}`](#wasm-operator-{0}): {about}",
            sub.get_name()
        );
    }
    out.push('\n');
    for sub in subcommands {
        let _ = writeln!(out, "## wasm-operator {}\n", sub.get_name());
        if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
            let _ = writeln!(out, "{}\n", cell(&about.to_string()));
        }
        render_args(&mut out, sub, false);
    }
    out.trim_end().to_string() + "\n"
}

#[test]
fn docs_flags_md_matches_the_command_line() {
    let path = flags_doc_path();
    let rendered = render();
    if std::env::var_os(UPDATE_ENV).is_some_and(|v| !v.is_empty()) {
        std::fs::write(&path, &rendered).expect("writing docs/flags.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != rendered {
        let first_difference = committed
            .lines()
            .zip(rendered.lines())
            .enumerate()
            .find(|(_, (old, new))| old != new)
            .map(|(n, (old, new))| {
                format!("line {}:\n  committed: {old}\n  rendered:  {new}", n + 1)
            })
            .unwrap_or_else(|| "one file is a prefix of the other".to_string());
        panic!(
            "docs/flags.md is out of date with the clap definition of `wasm-operator` \
             ({first_difference}).\nRegenerate it with \
             `{UPDATE_ENV}=1 cargo test -p wasm-operator --test flags_doc` and commit it."
        );
    }
}

#[test]
fn the_reference_names_every_visible_flag_of_run() {
    let rendered = render();
    let mut root = Cli::command();
    root.build();
    let run = root
        .find_subcommand("run")
        .expect("wasm-operator has a `run` subcommand");
    for arg in run.get_arguments().filter(|arg| !arg.is_hide_set()) {
        if let Some(long) = arg.get_long()
            && long != "help"
        {
            assert!(
                rendered.contains(&format!("--{long}")),
                "the rendered reference misses --{long}"
            );
        }
    }
    assert!(rendered.contains("WASM_OPERATOR_PLUGIN"));
    assert!(
        !rendered.contains("compile-plugin"),
        "hidden subcommands stay out"
    );
}
