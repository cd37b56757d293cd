//! RFC 3339 timestamps (`2026-01-01T00:00:00Z`, optional fraction and
//! offset) to and from the WIT `timestamp`.

use jinghzhu_plugin_sdk::types::Timestamp;

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn number(s: &str, what: &str) -> Result<i64, String> {
    s.parse::<i64>()
        .map_err(|e| format!("bad {what} {s:?}: {e}"))
}

/// Parses an RFC 3339 date-time.
pub fn parse_rfc3339(text: &str) -> Result<Timestamp, String> {
    let text = text.trim();
    let bad = || format!("not an RFC 3339 time: {text:?}");
    let (date, rest) = text.split_once(['T', 't']).ok_or_else(bad)?;
    let mut ymd = date.splitn(3, '-');
    let (Some(y), Some(mo), Some(d)) = (ymd.next(), ymd.next(), ymd.next()) else {
        return Err(bad());
    };
    let (clock, offset_secs) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let at = rest.rfind(['+', '-']).ok_or_else(bad)?;
        let (clock, offset) = rest.split_at(at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (oh, om) = offset[1..].split_once(':').ok_or_else(bad)?;
        (
            clock,
            sign * (number(oh, "offset")? * 3600 + number(om, "offset")? * 60),
        )
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut parts = hms.splitn(3, ':');
    let (Some(h), Some(mi), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let days = days_from_civil(number(y, "year")?, number(mo, "month")?, number(d, "day")?);
    let seconds = days * 86_400
        + number(h, "hour")? * 3600
        + number(mi, "minute")? * 60
        + number(s, "second")?
        - offset_secs;
    let nanoseconds = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction
            .chars()
            .chain(std::iter::repeat('0'))
            .take(9)
            .collect();
        u32::try_from(number(&digits, "fraction")?).map_err(|_| bad())?
    };
    Ok(Timestamp {
        seconds,
        nanoseconds,
    })
}

#[test]
fn parses_utc_fractions_and_offsets() {
    assert_eq!(
        parse_rfc3339("1970-01-01T00:00:00Z"),
        Ok(Timestamp::from_secs(0))
    );
    assert_eq!(
        parse_rfc3339("2026-01-01T00:00:00Z"),
        Ok(Timestamp::from_secs(1_767_225_600))
    );
    assert_eq!(
        parse_rfc3339("2023-11-14T22:13:20.5Z"),
        Ok(Timestamp {
            seconds: 1_700_000_000,
            nanoseconds: 500_000_000
        })
    );
    assert_eq!(
        parse_rfc3339("2023-11-15T00:13:20+02:00"),
        Ok(Timestamp::from_secs(1_700_000_000))
    );
    assert!(parse_rfc3339("yesterday").is_err());
}
