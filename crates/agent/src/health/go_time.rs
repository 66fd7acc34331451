//! Times as kube-proxy's Go prints them in its health bodies.

use std::time::{SystemTime, UNIX_EPOCH};

/// A time as Go's `%q` of a `time.Time` prints it, in UTC:
/// `"2024-05-06 07:08:09.123456789 +0000 UTC"`; `None` is Go's zero time.
pub fn go_time_json(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return "\"0001-01-01 00:00:00 +0000 UTC\"".into();
    };
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86400, secs % 86400);
    let (y, m, day) = civil_from_days(days as i64);
    let nanos = d.subsec_nanos();
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{}", format!("{nanos:09}").trim_end_matches('0'))
    };
    format!(
        "\"{y:04}-{m:02}-{day:02} {:02}:{:02}:{:02}{frac} +0000 UTC\"",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_time_format() {
        assert_eq!(
            go_time_json(Some(UNIX_EPOCH)),
            "\"1970-01-01 00:00:00 +0000 UTC\""
        );
        assert_eq!(
            go_time_json(Some(UNIX_EPOCH + Duration::new(951_782_400, 120_000_000))),
            "\"2000-02-29 00:00:00.12 +0000 UTC\""
        );
        assert_eq!(
            go_time_json(Some(UNIX_EPOCH + Duration::new(4_102_444_799, 1))),
            "\"2099-12-31 23:59:59.000000001 +0000 UTC\""
        );
    }
}
