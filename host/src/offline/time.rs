//! RFC 3339 times for `--now` and fixture `now` files.

use std::time::SystemTime;

use anyhow::{Context, Result};
use k8s_openapi::jiff::Timestamp;

/// Parses an RFC 3339 time such as `2026-01-01T00:00:00Z`.
pub fn parse_time(text: &str) -> Result<SystemTime> {
    let timestamp: Timestamp = text
        .parse()
        .with_context(|| format!("{text:?} is not an RFC 3339 time (e.g. 2026-01-01T00:00:00Z)"))?;
    Ok(SystemTime::from(timestamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc3339() {
        let t = parse_time("2026-01-01T00:00:01.5Z").expect("time");
        let since = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970");
        assert_eq!(
            (since.as_secs(), since.subsec_millis()),
            (1_767_225_601, 500)
        );
        assert!(parse_time("yesterday").is_err());
    }
}
