//! A line diff of two texts (expected and actual proposals as YAML), for
//! fixture failures: `-` lines only in the expected text, `+` lines only in
//! the actual one, a little unchanged context around each change.

/// Lines of unchanged context shown around changes.
const CONTEXT: usize = 2;

enum Line<'a> {
    Same(&'a str),
    Expected(&'a str),
    Actual(&'a str),
}

/// A readable diff of `expected` and `actual`; empty when they are equal.
pub fn diff(expected: &str, actual: &str) -> String {
    let lines = diff_lines(expected, actual);
    let changed: Vec<bool> = lines.iter().map(|l| !matches!(l, Line::Same(_))).collect();
    let near_change = |i: usize| {
        let from = i.saturating_sub(CONTEXT);
        let to = (i + CONTEXT + 1).min(lines.len());
        changed[from..to].iter().any(|&c| c)
    };
    let mut out = String::new();
    let mut skipped = false;
    for (i, line) in lines.iter().enumerate() {
        if !near_change(i) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push_str("  ...\n");
            skipped = false;
        }
        let (mark, text) = match line {
            Line::Same(t) => (' ', t),
            Line::Expected(t) => ('-', t),
            Line::Actual(t) => ('+', t),
        };
        out.push(mark);
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    }
    out
}

/// Longest-common-subsequence alignment; proposals are a few dozen lines.
fn diff_lines<'a>(expected: &'a str, actual: &'a str) -> Vec<Line<'a>> {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0_usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            out.push(Line::Same(a[i]));
            i += 1;
            j += 1;
        } else if lcs[i + 1][j] >= lcs[i][j + 1] {
            out.push(Line::Expected(a[i]));
            i += 1;
        } else {
            out.push(Line::Actual(b[j]));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| Line::Expected(l)));
    out.extend(b[j..].iter().map(|l| Line::Actual(l)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(diff("a\nb\n", "a\nb\n"), "");
    }

    #[test]
    fn changes_are_marked_with_context() {
        let expected = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let actual = "a\nb\nc\nd\nE\nf\ng\nh\ni\n";
        assert_eq!(
            diff(expected, actual),
            "  ...\n  c\n  d\n- e\n+ E\n  f\n  g\n  h\n+ i\n"
        );
    }
}
