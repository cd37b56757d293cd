//! Why the host refused something a plugin author, a publisher or a
//! resource offered it: the rule that refused it and a message for people.
//! One type from where a refusal is made (a source, the vetting, the slot,
//! a resource's spec) to where it is reported (a log line, `/status`, a
//! condition, a Warning Event), so no rule is ever read back out of text.

use std::fmt;

/// A refusal by one rule (`plugin/digest-pin`, `oci/unsigned`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule id: `area/name`.
    pub rule: &'static str,
    /// What happened and what to do, for people.
    pub message: String,
}

impl Refusal {
    /// A refusal by `rule`.
    pub fn new(rule: &'static str, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }

    /// The rule's last part in CamelCase (`plugin/digest-pin` →
    /// `DigestPin`), for condition and Event reasons.
    pub fn reason(&self) -> String {
        let last = self.rule.rsplit('/').next().unwrap_or(self.rule);
        last.split('-')
            .map(|word| {
                let mut chars = word.chars();
                chars.next().map_or_else(String::new, |first| {
                    first.to_ascii_uppercase().to_string() + chars.as_str()
                })
            })
            .collect()
    }
}

/// `[rule] message`: how a refusal reads in logs, `/status` and Events.
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.rule, self.message)
    }
}

impl std::error::Error for Refusal {}

/// A registry's refusal (`oci/…`), under its rule.
impl From<crate::registry::OciError> for Refusal {
    fn from(error: crate::registry::OciError) -> Self {
        Self::new(error.rule, error.message)
    }
}

/// A plugin file's refusal (`file/…`), under its rule.
impl From<&crate::registry::bounded::FileRefusal> for Refusal {
    fn from(refused: &crate::registry::bounded::FileRefusal) -> Self {
        Self::new(refused.rule(), refused.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_rule_in_text_and_reason() {
        let refusal = Refusal::new("plugin/digest-pin", "not the pinned digest");
        assert_eq!(
            refusal.to_string(),
            "[plugin/digest-pin] not the pinned digest"
        );
        assert_eq!(refusal.reason(), "DigestPin");
        assert_eq!(Refusal::new("oci/unsigned", "").reason(), "Unsigned");
        assert_eq!(Refusal::new("odd", "").reason(), "Odd");
    }
}
