//! The agent's log on standard error: kube-proxy's `-v` levels (or `RUST_LOG`), text or JSON
//! (`logging.format`), and colour only for a person at a terminal.
//!
//! Colour codes in a file, `kubectl logs` or a log shipper are noise that breaks `grep` and
//! parsers, so the text format is coloured only when standard error is a terminal that is not
//! `TERM=dumb`, and never when `NO_COLOR` is set.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One human-readable line per event.
    Text,
    /// One JSON object per event (`logging.format: json`).
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

/// The level of kube-proxy's `-v`: up to 1 info, up to 4 debug, then trace.
pub fn level(verbosity: u8) -> &'static str {
    match verbosity {
        0..=1 => "info",
        2..=4 => "debug",
        _ => "trace",
    }
}

/// Whether text lines carry ANSI colour: only on a terminal (`is_terminal`) whose `term` is
/// known and not `dumb`, and not when `no_color` (the `NO_COLOR` convention) is set.
pub fn colour(is_terminal: bool, term: Option<&str>, no_color: bool) -> bool {
    is_terminal && term.is_some_and(|t| !t.is_empty() && t != "dumb") && !no_color
}

/// Installs the global logger on standard error: `RUST_LOG` when set, else `default_level`.
/// Fails when a logger is already installed.
pub fn init(default_level: &str, format: Format) -> Result<(), Box<dyn std::error::Error>> {
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var("TERM").ok().as_deref(),
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
    );
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
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
        Format::Json => Box::new(builder.json().finish()),
        Format::Text => Box::new(builder.with_ansi(ansi).finish()),
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

    fn logged(format: Format, ansi: bool) -> String {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let logger = subscriber(EnvFilter::new("info"), format, ansi, move || out.clone());
        tracing::subscriber::with_default(logger, || {
            tracing::warn!(port = 30000, "a port is taken");
        });
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_log_that_is_not_a_terminal_has_no_escape_codes() {
        let plain = logged(Format::Text, colour(false, Some("xterm"), false));
        assert!(plain.contains("a port is taken port=30000"), "{plain:?}");
        assert!(!plain.contains('\x1b'), "{plain:?}");
        // What the check would catch: the same line coloured.
        assert!(logged(Format::Text, true).contains('\x1b'));
        let json = logged(Format::Json, true);
        assert!(!json.contains('\x1b'), "{json:?}");
        let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(v["fields"]["port"], 30000);
    }
}
