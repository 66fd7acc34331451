//! An event's message and key/value pairs, collected once and written by either format.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};

/// One value of a pair: klog and Kubernetes' JSON write numbers and booleans bare and
/// everything else (strings, `Display` and `Debug` values) as a quoted string.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string, written quoted.
    Text(String),
    /// A signed integer.
    Int(i128),
    /// An unsigned integer.
    Uint(u128),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// The message and the pairs of one event, in the order they were given.
#[derive(Debug, Default)]
pub struct Collected {
    /// The `message` field (empty when the event has none).
    pub message: String,
    /// Every other field. `error` is renamed `err`, the key Kubernetes logs an error under
    /// (`klog.ErrorS`, zapr's `ErrorKey`).
    pub pairs: Vec<(&'static str, Value)>,
}

impl Collected {
    /// Collects `event`'s fields.
    pub fn of(event: &tracing::Event<'_>) -> Self {
        let mut out = Self::default();
        event.record(&mut out);
        out
    }

    fn push(&mut self, field: &Field, value: Value) {
        let key = match field.name() {
            "error" => "err",
            name => name,
        };
        self.pairs.push((key, value));
    }
}

impl Visit for Collected {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else {
            self.push(field, Value::Text(text));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.push(field, Value::Text(value.to_string()));
        }
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, Value::Text(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::Int(value.into()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::Uint(value.into()));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push(field, Value::Int(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push(field, Value::Uint(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Value::Float(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::Bool(value));
    }
}

/// Writes `s` as Go's `strconv.Quote` does (klog's `%q`): `"`, `\` and control characters
/// escaped, printable Unicode kept as it is.
pub fn go_quote(out: &mut impl fmt::Write, s: &str) -> fmt::Result {
    out.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\u{7}' => out.write_str("\\a")?,
            '\u{8}' => out.write_str("\\b")?,
            '\u{c}' => out.write_str("\\f")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            '\u{b}' => out.write_str("\\v")?,
            c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(out, "\\x{:02x}", c as u32)?,
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    write!(out, "\\u{:04x}", c as u32)?
                } else {
                    write!(out, "\\U{:08x}", c as u32)?
                }
            }
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_follows_go() {
        // (input, strconv.Quote's output)
        let cases = [
            ("plain", r#""plain""#),
            (r#"scheduler "lblc""#, r#""scheduler \"lblc\"""#),
            ("a\\b", r#""a\\b""#),
            ("tab\tnew\nline\r", r#""tab\tnew\nline\r""#),
            ("\u{1b}[31m", r#""\x1b[31m""#),
            ("\u{7f}", r#""\x7f""#),
            ("\u{85}", r#""\u0085""#),
            ("héllo ☃", r#""héllo ☃""#),
        ];
        for (input, want) in cases {
            let mut out = String::new();
            go_quote(&mut out, input).unwrap();
            assert_eq!(out, want, "{input:?}");
        }
    }
}
