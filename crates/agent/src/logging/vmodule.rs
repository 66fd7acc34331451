//! klog's `--vmodule` (`pattern=N,...`) as `EnvFilter` directives on our modules.
//!
//! klog matches a pattern (a glob, `*` and `?`) against the base name of the Go file that
//! logs, without `.go`. Our nearest equivalent of a file is a module, so a pattern is matched
//! against the last segment of each of the agent's modules (`sync`, `ipvs`, `api`...), and
//! every module it matches gets `N`'s level. A pattern that names none of them (kube-proxy's
//! `proxier*`, say) cannot be honoured and is reported, once, as a warning.

use super::level;

/// The agent's modules that log, by Rust path under the crate.
const MODULES: &[&str] = &[
    "cli",
    "config_file",
    "dataplane",
    "dataplane::child",
    "dataplane::conntrack",
    "dataplane::families",
    "dataplane::iptables",
    "dataplane::kernel",
    "dataplane::kernel::addresses",
    "dataplane::kernel::ipvs",
    "dataplane::kernel::reader",
    "dataplane::kernel::schedule",
    "dataplane::kernel::sets",
    "dataplane::kernel::worker",
    "dataplane::leftovers",
    "dataplane::link",
    "dataplane::memory",
    "dataplane::modules",
    "dataplane::sysctl",
    "dataplane::vip",
    "health",
    "k8s",
    "k8s::convert",
    "k8s::events",
    "metrics",
    "model",
    "run",
    "source",
    "source::api",
    "source::api::initial",
    "source::api::rate",
    "source::api::store",
    "source::manifests",
    "sync",
    "sync::failures",
    "sync::full_read",
    "sync::priority",
    "sync::programming",
    "sync::reading",
    "sync::run_loop",
    "web",
];

/// The crate's name as a tracing target.
const CRATE: &str = "kube_proxy_ipvs_agent";

/// A `--vmodule` entry whose pattern names none of the agent's modules: accepted, and
/// reported once, as its `Display`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--vmodule {pattern}={verbosity}: accepted, not used: it names none of kube-proxy-ipvs's modules ({})",
    module_names()
)]
pub struct Unused {
    /// The entry's pattern.
    pub pattern: String,
    /// Its verbosity.
    pub verbosity: u32,
}

/// The directives for `(pattern, verbosity)` entries, and the entries whose pattern names
/// none of our modules.
pub fn directives(entries: &[(String, u32)]) -> (Vec<String>, Vec<Unused>) {
    let mut directives = Vec::new();
    let mut warnings = Vec::new();
    for (pattern, v) in entries {
        let stem = pattern
            .strip_suffix(".go")
            .or_else(|| pattern.strip_suffix(".rs"))
            .unwrap_or(pattern);
        let matched: Vec<&str> = MODULES
            .iter()
            .filter(|m| glob(stem, m.rsplit("::").next().unwrap_or(m)))
            .copied()
            .collect();
        if matched.is_empty() {
            warnings.push(Unused {
                pattern: pattern.clone(),
                verbosity: *v,
            });
        }
        directives.extend(
            matched
                .into_iter()
                .map(|m| format!("{CRATE}::{m}={}", level(*v))),
        );
    }
    (directives, warnings)
}

/// The names a pattern can match, for the warning.
fn module_names() -> String {
    let mut names: Vec<&str> = MODULES
        .iter()
        .map(|m| m.rsplit("::").next().unwrap_or(m))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

/// klog's glob: `*` any run of characters, `?` any one, everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer match with one backtrack point for the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// A `--vmodule` entry that is not `pattern=N`; the text is the error's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// No `=`.
    #[error("{entry:?}: expected pattern=N")]
    Syntax {
        /// The entry.
        entry: String,
    },
    /// `=N` with no pattern.
    #[error("{entry:?}: the pattern is empty")]
    EmptyPattern {
        /// The entry.
        entry: String,
    },
    /// `pattern=x`: not a number.
    #[error("{entry:?}: {level:?} is not a verbosity level")]
    Level {
        /// The entry.
        entry: String,
        /// What stands for the level.
        level: String,
    },
}

/// Parses klog's `--vmodule` value: `pattern=N` entries separated by commas.
pub fn parse(value: &str) -> Result<Vec<(String, u32)>, EntryError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let (pattern, v) = entry.split_once('=').ok_or_else(|| EntryError::Syntax {
                entry: entry.to_string(),
            })?;
            if pattern.is_empty() {
                return Err(EntryError::EmptyPattern {
                    entry: entry.to_string(),
                });
            }
            let v = v.parse::<u32>().map_err(|_| EntryError::Level {
                entry: entry.to_string(),
                level: v.to_string(),
            })?;
            Ok((pattern.to_string(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_klog_does() {
        // (pattern, name, matches)
        let cases = [
            ("sync", "sync", true),
            ("sync", "synced", false),
            ("sy*", "sync", true),
            ("*ipvs*", "ipvs", true),
            ("i?vs", "ipvs", true),
            ("*", "anything", true),
            ("proxier*", "sync", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(glob(p, n), want, "{p} {n}");
        }
    }

    #[test]
    fn patterns_become_directives_on_our_modules() {
        let entries = parse("sync=4,ipvs.rs=2,proxier*=5").unwrap();
        let (directives, warnings) = directives(&entries);
        assert_eq!(
            directives,
            [
                "kube_proxy_ipvs_agent::sync=debug",
                "kube_proxy_ipvs_agent::dataplane::kernel::ipvs=debug"
            ]
        );
        assert_eq!(
            warnings,
            [Unused {
                pattern: "proxier*".into(),
                verbosity: 5
            }]
        );
        // Every directive is one EnvFilter takes.
        for d in &directives {
            d.parse::<tracing_subscriber::filter::Directive>().unwrap();
        }
    }

    #[test]
    fn bad_entries_are_named() {
        let entry = |e: &str| e.to_string();
        assert_eq!(
            parse("sync"),
            Err(EntryError::Syntax {
                entry: entry("sync")
            })
        );
        assert_eq!(
            parse("=2"),
            Err(EntryError::EmptyPattern { entry: entry("=2") })
        );
        assert_eq!(
            parse("sync=x"),
            Err(EntryError::Level {
                entry: entry("sync=x"),
                level: entry("x")
            })
        );
        assert_eq!(parse("").unwrap(), []);
    }
}
