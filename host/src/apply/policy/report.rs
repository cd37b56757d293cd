//! The result of a policy check: [`Violation`]s with a stable rule id, and
//! the bounded list they are collected in (a plugin proposing a spec with a
//! thousand bad containers gets [`MAX_VIOLATIONS`] lines and a count).

/// Most violations reported for one spec (or one metadata check); the rest
/// are counted in one final `policy/more` violation.
pub const MAX_VIOLATIONS: usize = 8;

/// One broken rule: a stable kebab-case rule id (e.g.
/// `restricted/capabilities`, `host/service-account`,
/// `template/spec-differs`, `labels/reserved-key`) and a message naming the
/// field path (e.g. `containers[1].securityContext.capabilities.add`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule id.
    pub rule: &'static str,
    /// What is wrong and where.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.rule)
    }
}

/// Collects at most [`MAX_VIOLATIONS`]; messages are only built for those
/// kept, so a check costs no allocation while everything passes.
#[derive(Debug, Default)]
pub(crate) struct Report {
    kept: Vec<Violation>,
    more: usize,
}

impl Report {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records a broken `rule`; `message` is called only if it is kept.
    pub(crate) fn push(&mut self, rule: &'static str, message: impl FnOnce() -> String) {
        if self.kept.len() < MAX_VIOLATIONS {
            self.kept.push(Violation {
                rule,
                message: message(),
            });
        } else {
            self.more += 1;
        }
    }

    /// The violations, with a final `policy/more` if some were dropped.
    pub(crate) fn finish(mut self) -> Vec<Violation> {
        if self.more > 0 {
            self.kept.push(Violation {
                rule: "policy/more",
                message: format!("…and {} more violations", self.more),
            });
        }
        self.kept
    }
}
