//! klog's text format (`--logging-format=text`, kube-proxy's default):
//!
//! ```text
//! I1126 08:25:47.909783      12 run_loop.rs:181] "synced" ops=3 elapsed="1.2ms"
//! ```
//!
//! The severity letter (`I`, `W`, `E`), month and day, the time with microseconds (UTC), the
//! process id right-aligned in 7 columns, the source file and line, `] `, the message quoted
//! as Go's `%q` would, then the pairs: numbers and booleans bare, everything else quoted, and
//! a string of several lines in klog's `key=<` block, one tab-indented line each.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::fields::{Collected, Value, go_quote};

/// The klog text formatter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Klog;

/// klog's severity letter for a tracing level: tracing's info, debug and trace are all
/// klog's info (they differ in verbosity, not severity).
pub fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// The source file's name without its directories, as klog writes it; a `mod.rs` keeps its
/// folder (`manifests/mod.rs`), which alone names the module.
pub fn caller(meta: &tracing::Metadata<'_>) -> String {
    let file = meta.file().unwrap_or("???");
    let mut parts = file.rsplit(['/', '\\']);
    let base = parts.next().unwrap_or(file);
    let line = meta.line().unwrap_or(0);
    match parts.next() {
        Some(folder) if base == "mod.rs" => format!("{folder}/{base}:{line}"),
        _ => format!("{base}:{line}"),
    }
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let letter = severity(meta.level());
        // Colour the severity only: the rest of the line stays greppable either way.
        let (on, off) = match (w.has_ansi_escapes(), letter) {
            (true, 'E') => ("\x1b[31m", "\x1b[0m"),
            (true, 'W') => ("\x1b[33m", "\x1b[0m"),
            (true, _) => ("\x1b[32m", "\x1b[0m"),
            (false, _) => ("", ""),
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        write!(
            w,
            "{on}{letter}{off}{} {:>7} {}] ",
            now.strftime("%m%d %H:%M:%S%.6f"),
            std::process::id(),
            caller(meta),
        )?;
        let fields = Collected::of(event);
        go_quote(&mut w, &fields.message)?;
        for (key, value) in &fields.pairs {
            write!(w, " {key}=")?;
            write_value(&mut w, value)?;
        }
        writeln!(w)
    }
}

/// One value as klog writes it.
fn write_value(w: &mut impl fmt::Write, value: &Value) -> fmt::Result {
    match value {
        Value::Text(s) if s.contains('\n') => {
            // klog's multi-line form: `key=<`, each line after a tab, then ` >`.
            w.write_str("<\n")?;
            for line in s.trim_end_matches('\n').split('\n') {
                writeln!(w, "\t{line}")?;
            }
            w.write_str(" >")
        }
        Value::Text(s) => go_quote(w, s),
        Value::Int(n) => write!(w, "{n}"),
        Value::Uint(n) => write!(w, "{n}"),
        Value::Float(x) => write!(w, "{x}"),
        Value::Bool(b) => write!(w, "{b}"),
    }
}
