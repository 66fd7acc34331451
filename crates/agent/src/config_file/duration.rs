//! Go's `time.Duration` text form, as `metav1.Duration` reads and writes it (`"30s"`,
//! `"1m0s"`, `"1h30m"`, `"-5s"`, `"250ms"`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A signed duration in nanoseconds, read and written in Go's text form.
///
/// Signed because kube-proxy's validation has to see (and reject) `"-1s"`; [`Self::to_std`]
/// gives the unsigned `Duration` once validation has passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration {
    nanos: i64,
}

const NS: i128 = 1;
const US: i128 = 1_000;
const MS: i128 = 1_000_000;
const SEC: i128 = 1_000_000_000;
const MIN: i128 = 60 * SEC;
const HOUR: i128 = 60 * MIN;

impl GoDuration {
    /// Zero.
    pub const ZERO: GoDuration = GoDuration { nanos: 0 };

    /// From nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        Self { nanos }
    }

    /// From whole seconds.
    pub const fn from_secs(secs: i64) -> Self {
        Self {
            nanos: secs.saturating_mul(1_000_000_000),
        }
    }

    /// From a std `Duration` (saturating at Go's maximum, about 292 years).
    pub fn from_std(d: Duration) -> Self {
        Self {
            nanos: i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        }
    }

    /// The nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.nanos
    }

    /// True for zero.
    pub const fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// True below zero.
    pub const fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// The std `Duration`; a negative value gives zero (validation rejects those first).
    pub fn to_std(self) -> Duration {
        Duration::from_nanos(u64::try_from(self.nanos).unwrap_or(0))
    }

    /// Parses Go's `time.ParseDuration` syntax: an optional sign, then one or more
    /// `<number><unit>` with units `ns`, `us` (`µs`, `μs`), `ms`, `s`, `m`, `h`; `"0"` alone
    /// needs no unit.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad =
            || format!("invalid duration {text:?} (expected e.g. \"30s\", \"1m30s\", \"500ms\")");
        let (negative, mut rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        if rest == "0" {
            return Ok(Self::ZERO);
        }
        if rest.is_empty() {
            return Err(bad());
        }
        let mut total: i128 = 0;
        while !rest.is_empty() {
            let int_end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (int_part, after) = rest.split_at(int_end);
            let (frac_part, after) = match after.strip_prefix('.') {
                Some(f) => {
                    let end = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
                    f.split_at(end)
                }
                None => ("", after),
            };
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(bad());
            }
            let unit_end = after
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_end);
            let scale = match unit {
                "ns" => NS,
                "us" | "\u{b5}s" | "\u{3bc}s" => US,
                "ms" => MS,
                "s" => SEC,
                "m" => MIN,
                "h" => HOUR,
                "" => return Err(format!("missing unit in duration {text:?}")),
                other => return Err(format!("unknown unit {other:?} in duration {text:?}")),
            };
            let whole: i128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| bad())?
            };
            let mut part = whole.checked_mul(scale).ok_or_else(bad)?;
            if !frac_part.is_empty() {
                // Digits past nanosecond precision cannot change the result.
                let digits = &frac_part[..frac_part.len().min(18)];
                let frac: i128 = digits.parse().map_err(|_| bad())?;
                part += frac * scale / 10i128.pow(digits.len() as u32);
            }
            total = total.checked_add(part).ok_or_else(bad)?;
            if total > i128::from(i64::MAX) + 1 {
                return Err(bad());
            }
            rest = after;
        }
        let signed = if negative { -total } else { total };
        i64::try_from(signed)
            .map(Self::from_nanos)
            .map_err(|_| bad())
    }
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String()`: `0s`, `250ms`, `1.5µs`, `30s`, `1m0s`, `24h0m0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0s");
        }
        if self.nanos < 0 {
            f.write_str("-")?;
        }
        let u = self.nanos.unsigned_abs();
        if u < 1_000_000_000 {
            let (digits, unit) = if u < 1_000 {
                (0, "ns")
            } else if u < 1_000_000 {
                (3, "\u{b5}s")
            } else {
                (6, "ms")
            };
            let scale = 10u64.pow(digits);
            return write!(f, "{}{}{unit}", u / scale, fraction(u % scale, digits));
        }
        let secs = u / 1_000_000_000;
        let frac = fraction(u % 1_000_000_000, 9);
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        if h > 0 {
            write!(f, "{h}h{m}m{s}{frac}s")
        } else if secs >= 60 {
            write!(f, "{m}m{s}{frac}s")
        } else {
            write!(f, "{s}{frac}s")
        }
    }
}

/// `.ddd` with trailing zeros dropped, or nothing.
fn fraction(value: u64, digits: u32) -> String {
    if value == 0 {
        return String::new();
    }
    let text = format!("{value:0width$}", width = digits as usize);
    format!(".{}", text.trim_end_matches('0'))
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    /// A string in Go's syntax, as `metav1.Duration` takes it; a number is refused, as there.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DurationVisitor { nanos_ok: false })
    }
}

/// A duration that may also be written as integer nanoseconds (component-base's
/// `TimeOrMetaDuration`, used by `logging.flushFrequency`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeOrDuration(pub GoDuration);

impl Serialize for TimeOrDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for TimeOrDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DurationVisitor { nanos_ok: true })
            .map(TimeOrDuration)
    }
}

struct DurationVisitor {
    nanos_ok: bool,
}

impl Visitor<'_> for DurationVisitor {
    type Value = GoDuration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos_ok {
            f.write_str("a Go duration such as \"30s\", or integer nanoseconds")
        } else {
            f.write_str("a Go duration string such as \"30s\" or \"1m0s\"")
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
        GoDuration::parse(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoDuration, E> {
        if self.nanos_ok {
            Ok(GoDuration::from_nanos(v))
        } else {
            Err(E::invalid_type(de::Unexpected::Signed(v), &self))
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoDuration, E> {
        match i64::try_from(v) {
            Ok(v) if self.nanos_ok => Ok(GoDuration::from_nanos(v)),
            _ => Err(E::invalid_type(de::Unexpected::Unsigned(v), &self)),
        }
    }

    // A YAML key with no value is JSON null, which Go leaves at the zero value.
    fn visit_unit<E: de::Error>(self) -> Result<GoDuration, E> {
        Ok(GoDuration::ZERO)
    }

    fn visit_none<E: de::Error>(self) -> Result<GoDuration, E> {
        Ok(GoDuration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_syntax() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("0s", 0),
            ("30s", 30_000_000_000),
            ("1m0s", 60_000_000_000),
            ("1m30s", 90_000_000_000),
            ("1h30m", 5_400_000_000_000),
            ("24h0m0s", 86_400_000_000_000),
            ("250ms", 250_000_000),
            ("1.5s", 1_500_000_000),
            (".5s", 500_000_000),
            ("1.s", 1_000_000_000),
            ("10us", 10_000),
            ("10\u{b5}s", 10_000),
            ("10\u{3bc}s", 10_000),
            ("7ns", 7),
            ("-5s", -5_000_000_000),
            ("+5s", 5_000_000_000),
            ("1h1m1s1ms1us1ns", 3_661_001_001_001),
        ];
        for (text, nanos) in cases {
            assert_eq!(
                GoDuration::parse(text),
                Ok(GoDuration::from_nanos(*nanos)),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_what_go_refuses() {
        for text in [
            "",
            "-",
            "30",
            "s",
            "1x",
            "1.2.3s",
            "ms5",
            "1 s",
            "99999999999999999999h",
        ] {
            assert!(GoDuration::parse(text).is_err(), "{text:?} accepted");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (7, "7ns"),
            (1_500, "1.5\u{b5}s"),
            (250_000_000, "250ms"),
            (1_500_000_000, "1.5s"),
            (30_000_000_000, "30s"),
            (60_000_000_000, "1m0s"),
            (900_000_000_000, "15m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (86_400_000_000_000, "24h0m0s"),
            (3_661_000_000_000, "1h1m1s"),
            (-5_000_000_000, "-5s"),
        ];
        for (nanos, text) in cases {
            let d = GoDuration::from_nanos(*nanos);
            assert_eq!(d.to_string(), *text);
            assert_eq!(GoDuration::parse(text), Ok(d), "round trip of {text}");
        }
    }

    #[test]
    fn numbers_are_durations_only_where_go_allows_them() {
        assert!(serde_saphyr::from_str::<GoDuration>("30").is_err());
        assert_eq!(
            serde_saphyr::from_str::<TimeOrDuration>("5000000000")
                .unwrap()
                .0,
            GoDuration::from_secs(5)
        );
        assert_eq!(
            serde_saphyr::from_str::<TimeOrDuration>("5s").unwrap().0,
            GoDuration::from_secs(5)
        );
        assert_eq!(
            serde_saphyr::from_str::<GoDuration>("~").unwrap(),
            GoDuration::ZERO
        );
    }
}
