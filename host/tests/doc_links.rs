//! Every relative link in the repository's Markdown (README.md, docs/,
//! plugins/, examples/, tests/) points at a file or directory that exists,
//! and every `#anchor` matches a heading of its target as GitHub makes them
//! (lower case, punctuation dropped, spaces as `-`, `-1`, `-2` for repeats).
//! Pure file reading: no cluster, no network. Links inside code (fenced
//! blocks, `inline code`) and to other sites are not checked; but a file
//! path of the repository written as inline code in README.md, docs/ or
//! plugins/ (`host/src/cached_pod.rs`, `examples/deploy/`) must exist too,
//! so a moved source file shows up here with the docs that name it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// Markdown files under `dir`, skipping build output, dependencies and
/// hidden directories.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                markdown_files(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The lines of `text` outside fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => lines.push((index + 1, line)),
            _ => {}
        }
    }
    lines
}

/// `line` without its `inline code` spans.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Targets of inline links `[text](target)` and reference definitions
/// `[name]: target` on one line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[')
        && let Some((_, after)) = rest.split_once("]:")
        && let Some(target) = after.split_whitespace().next()
    {
        targets.push(target.trim_matches(['<', '>']).to_string());
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    targets
}

/// A heading's text as GitHub renders it: code ticks, emphasis marks and
/// link syntax removed.
fn heading_text(raw: &str) -> String {
    let mut text = String::new();
    let mut rest = raw;
    // `[label](target)` keeps only the label.
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.replace(['`', '*'], "")
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading_text(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a Markdown file offers: its headings' slugs (repeats get
/// `-1`, `-2`, …) and explicit `<a name=…>` / `id="…"` anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let base = slug(trimmed[hashes..].trim().trim_end_matches('#'));
            let count = seen.entry(base.clone()).or_insert(0);
            let anchor = if *count == 0 {
                base.clone()
            } else {
                format!("{base}-{count}")
            };
            *count += 1;
            anchors.insert(anchor);
        }
        for marker in ["name=\"", "id=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(marker) {
                let after = &rest[at + marker.len()..];
                if let Some(end) = after.find('"') {
                    anchors.insert(after[..end].to_string());
                }
                rest = after;
            }
        }
    }
    anchors
}

/// The broken links of one file, as `file:line: target (why)`.
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("reading a Markdown file");
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut broken = Vec::new();
    for (number, line) in prose_lines(&text) {
        for target in link_targets(line) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path_part, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path_part.is_empty() {
                file.to_path_buf()
            } else if let Some(from_root) = path_part.strip_prefix('/') {
                root.join(from_root)
            } else {
                file.parent().unwrap_or(root).join(path_part)
            };
            if !resolved.exists() {
                broken.push(format!("{shown}:{number}: {target} (no such file)"));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if resolved.extension().is_none_or(|ext| ext != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
            if !anchors(&target_text).contains(&anchor.to_lowercase()) {
                broken.push(format!("{shown}:{number}: {target} (no such heading)"));
            }
        }
    }
    broken
}

/// Top-level directories whose paths the docs name in inline code.
const CODE_ROOTS: [&str; 7] = [
    "host/",
    "tests/",
    "plugins/",
    "examples/",
    "docs/",
    "wit/",
    ".ci/",
];

/// Whether an inline-code span names a file or directory of the
/// repository: under one of [`CODE_ROOTS`], no spaces or placeholders,
/// ending in a file name with an extension or in `/`. Rule ids such as
/// `host/run-as-group` have neither, and generated hidden directories are
/// left out.
fn repository_path(span: &str) -> Option<&str> {
    if !CODE_ROOTS.iter().any(|root| span.starts_with(root))
        || !span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
    {
        return None;
    }
    let trimmed = span.trim_end_matches('/');
    let parts: Vec<&str> = trimmed.split('/').collect();
    if parts
        .iter()
        .skip(1)
        .any(|part| part.starts_with('.') || part.is_empty())
    {
        return None;
    }
    let last = parts.last().copied().unwrap_or_default();
    (span.ends_with('/') || last.contains('.')).then_some(trimmed)
}

/// Repository paths in inline code of one file that do not exist, as
/// `file:line: path (no such file)`.
fn missing_code_paths(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("reading a Markdown file");
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    let mut missing = Vec::new();
    for (number, line) in prose_lines(&text) {
        for (index, span) in line.split('`').enumerate() {
            if index % 2 == 0 {
                continue;
            }
            if let Some(path) = repository_path(span)
                && !root.join(path).exists()
            {
                missing.push(format!("{shown}:{number}: {span} (no such file)"));
            }
        }
    }
    missing
}

#[test]
fn code_paths_named_in_the_docs_exist() {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    markdown_files(&root.join("docs"), &mut files);
    markdown_files(&root.join("plugins"), &mut files);
    files.sort();
    let missing: Vec<String> = files
        .iter()
        .flat_map(|file| missing_code_paths(&root, file))
        .collect();
    assert!(
        missing.is_empty(),
        "{} path(s) named in the docs do not exist (moved or renamed? update the docs):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn repository_paths_are_told_from_rule_ids() {
    assert_eq!(
        repository_path("host/src/cached_pod.rs"),
        Some("host/src/cached_pod.rs")
    );
    assert_eq!(repository_path("examples/deploy/"), Some("examples/deploy"));
    assert_eq!(repository_path("host/run-as-group"), None);
    assert_eq!(repository_path("plugins/go/.wit-go-runtime"), None);
    assert_eq!(repository_path("tests/e2e/tests/x.rs -- --nocapture"), None);
    assert_eq!(repository_path("cargo test"), None);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.md");
    std::fs::create_dir_all(dir.path().join("host/src")).expect("mkdir");
    std::fs::write(dir.path().join("host/src/here.rs"), "").expect("write");
    std::fs::write(
        &file,
        "`host/src/here.rs` and `host/src/gone.rs`\n```\n`host/src/fenced.rs`\n```\n",
    )
    .expect("write");
    assert_eq!(
        missing_code_paths(dir.path(), &file),
        vec!["a.md:1: host/src/gone.rs (no such file)".to_string()]
    );
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let root = repo_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("README.md")) && files.len() >= 5,
        "found too few Markdown files under {}: {files:?}",
        root.display()
    );
    let broken: Vec<String> = files
        .iter()
        .flat_map(|file| broken_links(&root, file))
        .collect();
    assert!(
        broken.is_empty(),
        "{} broken link(s) in the Markdown files:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(
        slug("Rolling out a plugin: canaries judged against the stable plugin"),
        "rolling-out-a-plugin-canaries-judged-against-the-stable-plugin"
    );
    assert_eq!(
        slug("Tenant plugins: one plugin per team (`--tenant-plugins`)"),
        "tenant-plugins-one-plugin-per-team---tenant-plugins"
    );
    assert_eq!(
        slug("Plugins in Python and JavaScript"),
        "plugins-in-python-and-javascript"
    );
    assert_eq!(
        slug("N = 1000, against [the floor](x.md)"),
        "n--1000-against-the-floor"
    );
    let text = "# A\n## Timings\n```sh\n# Not a heading\n```\n### Timings\n";
    let found = anchors(text);
    assert!(found.contains("timings") && found.contains("timings-1"));
    assert!(!found.contains("not-a-heading"));
}

#[test]
fn a_missing_file_and_a_missing_heading_are_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a.md");
    std::fs::write(dir.path().join("b.md"), "# Here\n").expect("write");
    std::fs::write(
        &file,
        "[ok](b.md#here) [gone](c.md) [bad](b.md#there) `[code](d.md)`\n\n```\n[x](e.md)\n```\n[self](#nowhere)\n",
    )
    .expect("write");
    let broken = broken_links(dir.path(), &file);
    assert_eq!(
        broken,
        vec![
            "a.md:1: c.md (no such file)".to_string(),
            "a.md:1: b.md#there (no such heading)".to_string(),
            "a.md:6: #nowhere (no such heading)".to_string(),
        ]
    );
}
