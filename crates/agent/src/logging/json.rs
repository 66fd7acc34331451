//! Kubernetes' JSON format (`--logging-format=json`, component-base's zap encoder):
//!
//! ```json
//! {"ts":1732609547909.783,"caller":"run_loop.rs:181","msg":"synced","v":0,"ops":3}
//! ```
//!
//! `ts` is milliseconds since the epoch as a float, `caller` the file and line, `msg` the
//! message, `v` the verbosity of an info line (absent on errors, as zapr writes them), then
//! the pairs; an error value is under `err`. There is no severity field (Kubernetes has
//! none): a warning is an info line at `v` 0, an error a line without `v`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::fields::{Collected, Value};
use super::klog::caller;

/// The JSON formatter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

/// The klog verbosity an event of `level` is logged at: info 0, debug 2 (shown from `-v=2`),
/// trace 5 (from `-v=5`); warnings count as info. `None` for errors, which have no
/// verbosity.
pub fn verbosity_of(level: &Level) -> Option<u32> {
    match *level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(2),
        Level::TRACE => Some(5),
    }
}

/// Writes `s` as a JSON string.
fn string(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    // serde_json cannot fail on a string; its escaping is JSON's own.
    w.write_str(&serde_json::to_string(s).map_err(|_| fmt::Error)?)
}

impl<S, N> FormatEvent<S, N> for Json
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
        let now = k8s_openapi::jiff::Timestamp::now();
        // Nanoseconds fit an i128; as f64 milliseconds they keep microsecond precision.
        let millis = now.as_nanosecond() as f64 / 1e6;
        write!(w, "{{\"ts\":{millis:.3},\"caller\":")?;
        string(&mut w, &caller(meta))?;
        let fields = Collected::of(event);
        w.write_str(",\"msg\":")?;
        string(&mut w, &fields.message)?;
        if let Some(v) = verbosity_of(meta.level()) {
            write!(w, ",\"v\":{v}")?;
        }
        for (key, value) in &fields.pairs {
            w.write_char(',')?;
            string(&mut w, key)?;
            w.write_char(':')?;
            match value {
                Value::Text(s) => string(&mut w, s)?,
                Value::Int(n) => write!(w, "{n}")?,
                Value::Uint(n) => write!(w, "{n}")?,
                // JSON has no NaN or infinity: those are written as strings.
                Value::Float(x) if x.is_finite() => write!(w, "{x}")?,
                Value::Float(x) => string(&mut w, &x.to_string())?,
                Value::Bool(b) => write!(w, "{b}")?,
            }
        }
        w.write_str("}\n")
    }
}
