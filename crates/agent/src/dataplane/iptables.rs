//! iptables at the edge: which backend the node uses, what our chains hold, and one
//! `iptables-restore --noflush` per family to rewrite them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

use crate::model::kernel::chains::JUMPS;
use crate::model::kernel::{Jump, Rules, Table};
use crate::model::snapshot::cluster::Family;

use super::Error;

/// The iptables flavour the node already uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `iptables-legacy` (x_tables).
    Legacy,
    /// `iptables-nft` (nf_tables with the xtables compat layer).
    Nft,
}

impl Backend {
    /// The tool of this backend for `family` (`ip6tables-nft`), with a verb (`save`).
    pub fn tool(self, family: Family, verb: &str) -> String {
        let base = match family {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        };
        let flavour = match self {
            Backend::Legacy => "legacy",
            Backend::Nft => "nft",
        };
        if verb.is_empty() {
            format!("{base}-{flavour}")
        } else {
            format!("{base}-{flavour}-{verb}")
        }
    }

    /// Picks the backend as the iptables wrapper of kube-proxy's image does: the one where the
    /// kubelet's canary chains or more rules already live; with no rules anywhere, the one the
    /// plain `iptables` command uses. See [`pick`] for when the legacy rules cannot be read.
    pub fn detect() -> Result<Backend, Error> {
        let legacy = Listing::read(Backend::Legacy);
        let nft = Listing::read(Backend::Nft);
        let plain_is_legacy = || {
            Command::new("iptables")
                .arg("--version")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("legacy"))
        };
        let (backend, warning) = pick(&legacy, &nft, plain_is_legacy)?;
        if let Some(warning) = warning {
            tracing::warn!(warning = warning.kind(), "{warning}");
        }
        Ok(backend)
    }
}

/// Lists the x_tables tables of the namespace; it exists once `ip_tables` is loaded, and only
/// uid 0 may read it.
const LEGACY_TABLES: &str = "/proc/net/ip_tables_names";

/// What one backend's `iptables-save` showed, for [`Backend::detect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// It listed the rules.
    Rules {
        /// The kubelet's canary chain or kube-proxy's hint chain is there.
        canary: bool,
        /// How many rules (`-A` lines) there are.
        rules: usize,
    },
    /// It failed.
    Failed {
        /// Its error output.
        message: String,
        /// The x_tables tables of the namespace (legacy only): `None` when that list cannot
        /// be read either (not uid 0), empty when `ip_tables` is not loaded.
        tables: Option<Vec<String>>,
    },
}

impl Listing {
    fn read(backend: Backend) -> Listing {
        let out = Command::new(backend.tool(Family::V4, "save")).output();
        match out {
            Ok(o) if o.status.success() => Listing::of(&String::from_utf8_lossy(&o.stdout)),
            failed => {
                let message = match failed {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                let tables = match backend {
                    Backend::Nft => Some(Vec::new()),
                    Backend::Legacy => match std::fs::read_to_string(LEGACY_TABLES) {
                        Ok(t) => Some(t.lines().map(str::to_string).collect()),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(Vec::new()),
                        Err(_) => None,
                    },
                };
                Listing::Failed { message, tables }
            }
        }
    }

    /// The listing of `iptables-save` output.
    pub fn of(text: &str) -> Listing {
        Listing::Rules {
            canary: text.contains("KUBE-IPTABLES-HINT") || text.contains("KUBE-KUBELET-CANARY"),
            rules: text.lines().filter(|l| l.starts_with("-A ")).count(),
        }
    }
}

/// Why the iptables backend cannot be picked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    /// Legacy tables exist but `iptables-legacy-save` cannot read them.
    #[error(
        "{program} failed: {message}: this node has iptables-legacy tables ({}) that the agent \
         cannot read, so it cannot tell which iptables backend the node uses; on an \
         iptables-legacy node the agent needs uid 0, CAP_NET_ADMIN and CAP_NET_RAW",
        .tables.join(", ")
    )]
    LegacyUnreadable {
        /// The tool that failed (`iptables-legacy-save`).
        program: String,
        /// Its error output.
        message: String,
        /// The legacy tables of the namespace.
        tables: Vec<String>,
    },
}

/// Why the iptables backend picked is a guess, to log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickWarning {
    /// Not even the list of legacy tables can be read (not uid 0).
    #[error(
        "cannot read the iptables-legacy rules ({message}), so the iptables backend is a \
         guess; if this node uses iptables-legacy, run the agent as uid 0 (with CAP_NET_ADMIN \
         and CAP_NET_RAW, see deploy/README.md)"
    )]
    Guess {
        /// `iptables-legacy-save`'s error output.
        message: String,
    },
}

impl PickWarning {
    /// The variant's name in kebab-case, a stable machine key for the log (`warning=`),
    /// unlike the text.
    pub fn kind(&self) -> &'static str {
        match self {
            PickWarning::Guess { .. } => "iptables-backend-guess",
        }
    }
}

/// Picks the backend from what each one's `iptables-save` showed (see [`Backend::detect`]),
/// with a warning to log when the choice is a guess.
///
/// A failed listing counts as empty, and the kubelet's canary in nf_tables settles it, with
/// two exceptions for legacy, whose `iptables-save`
/// needs uid 0 (to read `/proc/net/ip_tables_names`) and `CAP_NET_RAW`: when legacy tables exist but
/// cannot be read, the node may well be a legacy one and programming nf_tables would be
/// silently wrong, so that is an error naming what is missing; when not even the list of
/// tables can be read (not uid 0), the guess comes with a warning.
pub fn pick(
    legacy: &Listing,
    nft: &Listing,
    plain_is_legacy: impl FnOnce() -> bool,
) -> Result<(Backend, Option<PickWarning>), PickError> {
    let mut warning = None;
    let counts = |l: &Listing| match l {
        Listing::Rules { canary, rules } => (*canary, *rules),
        Listing::Failed { .. } => (false, 0),
    };
    let (nft_canary, nft_rules) = counts(nft);
    if let Listing::Failed { message, tables } = legacy
        && !nft_canary
    {
        match tables {
            Some(tables) if !tables.is_empty() => {
                return Err(PickError::LegacyUnreadable {
                    program: Backend::Legacy.tool(Family::V4, "save"),
                    message: message.clone(),
                    tables: tables.clone(),
                });
            }
            Some(_) => {}
            None => {
                warning = Some(PickWarning::Guess {
                    message: message.clone(),
                });
            }
        }
    }
    let (legacy_canary, legacy_rules) = counts(legacy);
    let backend = match (legacy_canary, nft_canary) {
        (true, false) => Backend::Legacy,
        (false, true) => Backend::Nft,
        _ if legacy_rules > nft_rules => Backend::Legacy,
        _ if legacy_rules < nft_rules => Backend::Nft,
        _ if plain_is_legacy() => Backend::Legacy,
        _ => Backend::Nft,
    };
    Ok((backend, warning))
}

/// What `iptables-save` shows of our chains in one family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// `(table, chain)` of our chains that exist.
    pub chains: BTreeSet<(Table, String)>,
    /// `(table, rule)` of our chains, in the order shown.
    pub rules: Vec<(Table, String)>,
    /// Our jumps from built-in chains that exist.
    pub jumps: Vec<Jump>,
}

/// Reads our chains with `iptables-save`.
pub fn read(backend: Backend, family: Family) -> Result<Seen, Error> {
    let mut seen = Seen::default();
    for table in Table::ALL {
        parse_save(
            table,
            &save(backend, family, Some(table.as_str()))?,
            &mut seen,
        );
    }
    Ok(seen)
}

/// `iptables-save` of `table`, or of every table there is when `None` (`-t mangle` would
/// load a table that is not there).
pub fn save(backend: Backend, family: Family, table: Option<&str>) -> Result<String, Error> {
    let tool = backend.tool(family, "save");
    let mut command = Command::new(&tool);
    if let Some(table) = table {
        command.args(["-t", table]);
    }
    let out = command.output().map_err(|e| Error::Exec {
        program: tool.clone(),
        source: e,
    })?;
    if !out.status.success() {
        return Err(Error::Tool {
            program: tool,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Collects our chains, their rules and our jumps from one table's `iptables-save` output.
pub fn parse_save(table: Table, text: &str, seen: &mut Seen) {
    let ours = |chain: &str| table.chains().contains(&chain);
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split_whitespace().next().unwrap_or("");
            if ours(chain) {
                seen.chains.insert((table, chain.to_string()));
            }
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or("");
            if ours(chain) {
                seen.rules.push((table, line.to_string()));
                continue;
            }
            for jump in JUMPS {
                if jump.table == table
                    && jump.chain == chain
                    && line.contains(&format!("-j {}", jump.target))
                    && line.contains(&format!("\"{}\"", jump.comment))
                    && !seen.jumps.contains(jump)
                {
                    seen.jumps.push(*jump);
                }
            }
        }
    }
}

/// How long `iptables-restore` waits for the xtables lock, and how often it tries, as
/// kube-proxy bounds it (`-w 5 -W 100000`): a lock another program keeps longer fails this
/// write, which the next sync retries, instead of stalling the sync loop for as long as the
/// lock is held. (iptables-nft takes no lock and ignores both.)
pub const RESTORE_WAIT: [&str; 4] = ["-w", "5", "-W", "100000"];

/// iptables' exit status when its wait for the xtables lock ran out (`RESOURCE_PROBLEM`).
const LOCK_WAIT_RAN_OUT: i32 = 4;

/// Runs `iptables-restore --noflush` with `input`, waiting at most 5 s for the xtables lock.
pub fn restore(backend: Backend, family: Family, input: &str) -> Result<(), Error> {
    let tool = backend.tool(family, "restore");
    let mut child = super::child::dies_with_agent(&mut Command::new(&tool))
        .arg("--noflush")
        .args(RESTORE_WAIT)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Exec {
            program: tool.clone(),
            source: e,
        })?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.as_bytes())
        .map_err(|e| Error::Exec {
            program: tool.clone(),
            source: e,
        })?;
    let out = child.wait_with_output().map_err(|e| Error::Exec {
        program: tool.clone(),
        source: e,
    })?;
    if !out.status.success() {
        let message = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.code() == Some(LOCK_WAIT_RAN_OUT) {
            return Err(Error::XtablesLocked {
                program: tool,
                message,
            });
        }
        return Err(Error::Tool {
            program: tool,
            message,
        });
    }
    Ok(())
}

/// Remembers, per family, the rules we last wrote and how `iptables-save` printed them, so
/// that reading them back can tell "unchanged" from "changed by someone else" whatever the
/// backend's printing quirks.
#[derive(Debug, Default)]
pub struct Written {
    by_family: BTreeMap<Family, (Rules, Vec<(Table, String)>)>,
}

impl Written {
    /// Records what was written and what `iptables-save` showed right after.
    pub fn record(&mut self, family: Family, rules: Rules, seen: &Seen) {
        self.by_family.insert(family, (rules, seen.rules.clone()));
    }

    /// The observed rules in the model's form: our last written rules when the kernel still
    /// shows exactly what it showed after that write, else what it shows.
    pub fn observed(&self, family: Family, seen: &Seen) -> Rules {
        let mut rules = match self.by_family.get(&family) {
            Some((written, canonical))
                if *canonical == seen.rules && written.chains == seen.chains =>
            {
                written.clone()
            }
            _ => Rules {
                chains: seen.chains.clone(),
                rules: seen.rules.clone(),
                jumps: Vec::new(),
            },
        };
        rules.jumps = seen.jumps.clone();
        rules
    }
}

/// Whether MASQUERADE supports `--random-fully` here.
pub fn supports_random_fully(backend: Backend) -> bool {
    let out = Command::new(backend.tool(Family::V4, ""))
        .args(["-j", "MASQUERADE", "--help"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).contains("random-fully"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(tables: Option<&[&str]>) -> Listing {
        Listing::Failed {
            message: "Permission denied (you must be root)".into(),
            tables: tables.map(|t| t.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn pick_follows_the_canary_then_the_rule_counts_then_the_plain_command() {
        let canary = Listing::of(":KUBE-KUBELET-CANARY - [0:0]\n");
        let empty = Listing::of("");
        let busy = Listing::of("-A INPUT -j ACCEPT\n-A OUTPUT -j ACCEPT\n");
        let cases = [
            (&canary, &busy, false, Backend::Legacy),
            (&busy, &canary, true, Backend::Nft),
            (&busy, &empty, false, Backend::Legacy),
            (&empty, &busy, true, Backend::Nft),
            (&empty, &empty, true, Backend::Legacy),
            (&empty, &empty, false, Backend::Nft),
        ];
        for (legacy, nft, plain, want) in cases {
            let got = pick(legacy, nft, || plain).unwrap();
            assert_eq!(got, (want, None), "{legacy:?} {nft:?} {plain}");
        }
    }

    #[test]
    fn unreadable_legacy_tables_are_an_error_or_a_warning_never_a_silent_guess() {
        let empty = Listing::of("");
        // uid 0 without CAP_NET_RAW on a node with legacy tables: an error naming the cap.
        let err = pick(&failed(Some(&["mangle", "nat"])), &empty, || false).unwrap_err();
        assert!(
            matches!(
                &err,
                PickError::LegacyUnreadable { program, tables, .. }
                    if program == "iptables-legacy-save" && tables == &["mangle", "nat"]
            ),
            "{err:?}"
        );
        // No legacy table at all: nothing to read, no doubt.
        assert_eq!(
            pick(&failed(Some(&[])), &empty, || false).unwrap(),
            (Backend::Nft, None)
        );
        // Not uid 0: the list of tables is unreadable too; a guess, with a warning.
        let (backend, warning) = pick(&failed(None), &empty, || false).unwrap();
        assert_eq!(backend, Backend::Nft);
        assert_eq!(
            warning,
            Some(PickWarning::Guess {
                message: "Permission denied (you must be root)".into()
            })
        );
        // The kubelet's canary in nf_tables settles it.
        let canary = Listing::of(":KUBE-IPTABLES-HINT - [0:0]\n");
        assert_eq!(
            pick(&failed(Some(&["nat"])), &canary, || false).unwrap(),
            (Backend::Nft, None)
        );
    }

    #[test]
    fn parse_save_keeps_our_chains_and_finds_our_jumps() {
        let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:OTHER - [0:0]\n\
            -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A PREROUTING -j OTHER\n-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN\n-A OTHER -j ACCEPT\nCOMMIT\n";
        let mut seen = Seen::default();
        parse_save(Table::Nat, text, &mut seen);
        assert_eq!(
            seen.chains,
            BTreeSet::from([(Table::Nat, "KUBE-SERVICES".to_string())])
        );
        assert_eq!(
            seen.rules,
            vec![(
                Table::Nat,
                "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN".to_string()
            )]
        );
        let prerouting: Vec<Jump> = JUMPS
            .iter()
            .filter(|j| j.chain == "PREROUTING")
            .copied()
            .collect();
        assert_eq!(seen.jumps, prerouting);
    }
}
