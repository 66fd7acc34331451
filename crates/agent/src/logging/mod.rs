//! The agent's log on standard error, written as kube-proxy's is: klog's text header
//! (`--logging-format=text`, the default; [`klog`]) or Kubernetes' JSON ([`json`]), at
//! kube-proxy's `-v` verbosity, with `--vmodule` patterns mapped onto our modules
//! ([`vmodule`]). `RUST_LOG`, when set, replaces the `-v`/`--vmodule` filter. [`fields`]
//! collects an event's message and pairs once, for either format to write.
//!
//! Verbosity: tracing's levels stand for klog's `-v` levels. kube-proxy logs its start-up and
//! changes of state at 0, the details of each sync at 2 and each object's change at 4:
//!
//! | tracing | klog severity | shown from | JSON `v` |
//! | --- | --- | --- | --- |
//! | ERROR | `E` | always | (none) |
//! | WARN | `W` | always | 0 |
//! | INFO | `I` | `-v=0` | 0 |
//! | DEBUG | `I` | `-v=2` (to 4) | 2 |
//! | TRACE | `I` | `-v=5` | 5 |
//!
//! Colour codes in a file, `kubectl logs` or a log shipper are noise that breaks `grep` and
//! parsers, so the text format colours its severity letter only when standard error is a
//! terminal that is not `TERM=dumb`, and never when `NO_COLOR` is set.

pub mod fields;
pub mod json;
pub mod klog;
pub mod vmodule;

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// klog's text lines (kube-proxy's default).
    Text,
    /// Kubernetes' JSON lines (`--logging-format=json`).
    Json,
}

impl Format {
    /// The format `logging.format` names: `json`, else text (kube-proxy's default).
    pub fn from_config(name: &str) -> Format {
        if name == "json" {
            Format::Json
        } else {
            Format::Text
        }
    }
}

/// The tracing level shown at kube-proxy's `-v`: up to 1 info, up to 4 debug, then trace.
pub fn level(verbosity: u32) -> &'static str {
    match verbosity {
        0..=1 => "info",
        2..=4 => "debug",
        _ => "trace",
    }
}

/// The filter for `-v` `verbosity` and the `--vmodule` entries, with a warning for each entry
/// that names none of our modules.
pub fn filter(verbosity: u32, vmodule: &[(String, u32)]) -> (EnvFilter, Vec<vmodule::Unused>) {
    let (directives, warnings) = vmodule::directives(vmodule);
    let spec = std::iter::once(level(verbosity).to_string())
        .chain(directives)
        .collect::<Vec<_>>()
        .join(",");
    // Every part is a level or a directive `vmodule` built from a level and a known module.
    (EnvFilter::new(spec), warnings)
}

/// Whether text lines carry ANSI colour: only on a terminal (`is_terminal`) whose `term` is
/// known and not `dumb`, and not when `no_color` (the `NO_COLOR` convention) is set.
pub fn colour(is_terminal: bool, term: Option<&str>, no_color: bool) -> bool {
    is_terminal && term.is_some_and(|t| !t.is_empty() && t != "dumb") && !no_color
}

/// Installs the global logger on standard error: `RUST_LOG` when set, else `filter`. Fails
/// when a logger is already installed.
pub fn init(filter: EnvFilter, format: Format) -> Result<(), Box<dyn std::error::Error>> {
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var("TERM").ok().as_deref(),
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
    );
    let filter = EnvFilter::try_from_default_env().unwrap_or(filter);
    tracing::subscriber::set_global_default(subscriber(filter, format, ansi, std::io::stderr))?;
    Ok(())
}

/// The logger writing to `writer`, coloured when `ansi` (text only; JSON never is).
pub fn subscriber<W>(
    filter: EnvFilter,
    format: Format,
    ansi: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        Format::Json => Box::new(builder.with_ansi(false).event_format(json::Json).finish()),
        Format::Text => Box::new(builder.with_ansi(ansi).event_format(klog::Klog).finish()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn colour_only_on_a_real_terminal() {
        // (stderr is a terminal, TERM, NO_COLOR) -> colour
        let cases = [
            (true, Some("xterm-256color"), false, true),
            (false, Some("xterm-256color"), false, false),
            (true, Some("dumb"), false, false),
            (true, None, false, false),
            (true, Some(""), false, false),
            (true, Some("xterm"), true, false),
        ];
        for (tty, term, no_color, want) in cases {
            assert_eq!(
                colour(tty, term, no_color),
                want,
                "{tty} {term:?} {no_color}"
            );
        }
    }

    /// Collects what a logger writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes through a logger of `format` filtered by `filter`.
    fn logged_with(filter: EnvFilter, format: Format, ansi: bool, log: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let logger = subscriber(filter, format, ansi, move || out.clone());
        tracing::subscriber::with_default(logger, log);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    fn logged(format: Format, ansi: bool) -> String {
        logged_with(EnvFilter::new("info"), format, ansi, || {
            tracing::warn!(port = 30000, "a port is taken");
        })
    }

    /// klog's header: severity, MMDD, time with microseconds, the id in 7 columns, file:line.
    fn klog_header() -> regex::Regex {
        regex::Regex::new(
            r#"^([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) ([ \d]{7}) ([^ :\]]+):(\d+)\] (.*)$"#,
        )
        .unwrap()
    }

    #[test]
    fn a_log_that_is_not_a_terminal_has_no_escape_codes() {
        let plain = logged(Format::Text, colour(false, Some("xterm"), false));
        assert!(
            plain.ends_with("] \"a port is taken\" port=30000\n"),
            "{plain:?}"
        );
        assert!(!plain.contains('\x1b'), "{plain:?}");
        // What the check would catch: the same line coloured.
        assert!(logged(Format::Text, true).contains('\x1b'));
        let json = logged(Format::Json, true);
        assert!(!json.contains('\x1b'), "{json:?}");
    }

    #[test]
    fn text_lines_have_klogs_header_and_quoting() {
        let text = logged_with(EnvFilter::new("debug"), Format::Text, false, || {
            tracing::info!(service = "t/web", ops = 3, ok = true, "synced");
            tracing::warn!("Service t/web: scheduler \"lblc\" refused; tab\there");
            let e = std::io::Error::other("boom \"x\"");
            tracing::error!(error = %e, ratio = 0.5, "cannot sync");
            tracing::debug!(elapsed = ?std::time::Duration::from_millis(12), "observed IPVS");
            tracing::trace!("not shown below -v=5");
            tracing::info!(plan = "one\ntwo\n", "a plan");
        });
        let header = klog_header();
        let lines: Vec<&str> = text.lines().collect();
        let parsed: Vec<regex::Captures> =
            lines.iter().filter_map(|l| header.captures(l)).collect();
        assert_eq!(parsed.len(), 5, "{text}");
        let pid = std::process::id().to_string();
        for c in &parsed {
            let month: u32 = c[2].parse().unwrap();
            let day: u32 = c[3].parse().unwrap();
            assert!(
                (1..=12).contains(&month) && (1..=31).contains(&day),
                "{c:?}"
            );
            assert!(c[4].parse::<u32>().unwrap() < 24);
            assert_eq!(c[8].trim_start(), pid);
            assert_eq!(&c[9], "logging/mod.rs");
            assert!(c[10].parse::<u32>().unwrap() > 0);
        }
        let rest: Vec<(&str, &str)> = parsed
            .iter()
            .map(|c| (c.get(1).unwrap().as_str(), c.get(11).unwrap().as_str()))
            .collect();
        assert_eq!(
            rest,
            [
                ("I", r#""synced" service="t/web" ops=3 ok=true"#),
                (
                    "W",
                    r#""Service t/web: scheduler \"lblc\" refused; tab\there""#
                ),
                ("E", r#""cannot sync" err="boom \"x\"" ratio=0.5"#),
                ("I", r#""observed IPVS" elapsed="12ms""#),
                ("I", r#""a plan" plan=<"#),
            ]
        );
        // klog's multi-line value: tab-indented lines, closed by " >".
        assert_eq!(lines[lines.len() - 3..], ["\tone", "\ttwo", " >"]);
    }

    #[test]
    fn json_lines_have_kubernetes_fields() {
        let before = k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64;
        let text = logged_with(EnvFilter::new("debug"), Format::Json, false, || {
            tracing::info!(service = "t/web", ops = 3, "synced");
            tracing::debug!(batch = 1, "sent an IPVS batch");
            let e = std::io::Error::other("boom");
            tracing::error!(error = %e, "cannot sync");
            tracing::warn!("Service t/web: scheduler \"lblc\" refused");
        });
        let after = k8s_openapi::jiff::Timestamp::now().as_millisecond() as f64 + 1.0;
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        for l in &lines {
            let ts = l["ts"].as_f64().unwrap();
            assert!((before..=after).contains(&ts), "ts {ts} in ms: {l}");
            let caller = l["caller"].as_str().unwrap();
            assert!(caller.starts_with("logging/mod.rs:"), "{l}");
            let keys: Vec<&String> = l.as_object().unwrap().keys().collect();
            assert!(keys.contains(&&"msg".to_string()), "{l}");
        }
        assert_eq!(lines[0]["msg"], "synced");
        assert_eq!(lines[0]["v"], 0);
        assert_eq!(lines[0]["service"], "t/web");
        assert_eq!(lines[0]["ops"], 3);
        assert_eq!(lines[1]["v"], 2);
        assert_eq!(lines[2]["err"], "boom");
        assert!(
            lines[2].get("v").is_none(),
            "an error has no v: {}",
            lines[2]
        );
        assert_eq!(lines[3]["msg"], "Service t/web: scheduler \"lblc\" refused");
        // The key order is zap's: ts, caller, msg, v, then the pairs.
        let first = text.lines().next().unwrap();
        let at = |k: &str| first.find(&format!("\"{k}\":")).unwrap();
        assert!(at("ts") < at("caller") && at("caller") < at("msg") && at("msg") < at("v"));
        assert!(at("v") < at("service"), "{first}");
    }

    #[test]
    fn verbosity_and_vmodule_pick_what_is_shown() {
        let run = |v: u32, vmodule: &[(String, u32)]| {
            let (filter, _) = filter(v, vmodule);
            logged_with(filter, Format::Text, false, || {
                tracing::info!("at 0");
                tracing::debug!("at 2");
                tracing::trace!("at 5");
                tracing::debug!(target: "kube_proxy_ipvs_agent::sync::reading", "sync detail");
            })
        };
        let count = |s: &str| s.lines().count();
        assert_eq!(count(&run(0, &[])), 1);
        assert_eq!(count(&run(1, &[])), 1);
        assert_eq!(count(&run(2, &[])), 3);
        assert_eq!(count(&run(4, &[])), 3);
        assert_eq!(count(&run(5, &[])), 4);
        let only_sync = run(0, &[("sync".into(), 4)]);
        assert_eq!(count(&only_sync), 2, "{only_sync}");
        assert!(only_sync.contains("sync detail"), "{only_sync}");
    }
}
