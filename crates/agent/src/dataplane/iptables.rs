//! iptables at the edge: which backend the node uses, what our chains hold, and one
//! `iptables-restore --noflush` per family to rewrite them.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

use crate::model::cluster::Family;
use crate::model::iptables::{FILTER_CHAINS, JUMPS, NAT_CHAINS, jump_rule};
use crate::model::kernel::Rules;

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
    fn tool(self, family: Family, verb: &str) -> String {
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
    /// plain `iptables` command uses.
    pub fn detect() -> Backend {
        let count = |b: Backend| -> (bool, usize) {
            let out = Command::new(b.tool(Family::V4, "save"))
                .stderr(Stdio::null())
                .output();
            let text = out
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let canary =
                text.contains("KUBE-IPTABLES-HINT") || text.contains("KUBE-KUBELET-CANARY");
            (
                canary,
                text.lines().filter(|l| l.starts_with("-A ")).count(),
            )
        };
        let (legacy_canary, legacy_rules) = count(Backend::Legacy);
        let (nft_canary, nft_rules) = count(Backend::Nft);
        match (legacy_canary, nft_canary) {
            (true, false) => return Backend::Legacy,
            (false, true) => return Backend::Nft,
            _ => {}
        }
        if legacy_rules != nft_rules {
            return if legacy_rules > nft_rules {
                Backend::Legacy
            } else {
                Backend::Nft
            };
        }
        let version = Command::new("iptables").arg("--version").output();
        match version {
            Ok(o) if String::from_utf8_lossy(&o.stdout).contains("legacy") => Backend::Legacy,
            _ => Backend::Nft,
        }
    }
}

/// What `iptables-save` shows of our chains in one family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// `(table, chain)` of our chains that exist.
    pub chains: BTreeSet<(String, String)>,
    /// `(table, rule)` of our chains, in the order shown.
    pub rules: Vec<(String, String)>,
    /// Our jumps from built-in chains that exist, in our own form (`jump_rule`).
    pub jumps: Vec<(String, String)>,
}

/// Reads our chains with `iptables-save`.
pub fn read(backend: Backend, family: Family) -> Result<Seen, Error> {
    let tool = backend.tool(family, "save");
    let mut seen = Seen::default();
    for table in ["nat", "filter"] {
        let out = Command::new(&tool)
            .args(["-t", table])
            .output()
            .map_err(|e| Error::Exec {
                program: tool.clone(),
                source: e,
            })?;
        if !out.status.success() {
            return Err(Error::Tool {
                program: tool.clone(),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        parse_save(table, &String::from_utf8_lossy(&out.stdout), &mut seen);
    }
    Ok(seen)
}

fn ours(table: &str, chain: &str) -> bool {
    match table {
        "nat" => NAT_CHAINS.contains(&chain),
        "filter" => FILTER_CHAINS.contains(&chain),
        _ => false,
    }
}

/// Collects our chains, their rules and our jumps from one table's `iptables-save` output.
pub fn parse_save(table: &str, text: &str, seen: &mut Seen) {
    for line in text.lines() {
        if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split_whitespace().next().unwrap_or("");
            if ours(table, chain) {
                seen.chains.insert((table.to_string(), chain.to_string()));
            }
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or("");
            if ours(table, chain) {
                seen.rules.push((table.to_string(), line.to_string()));
                continue;
            }
            for (t, c, comment, target) in JUMPS {
                if *t == table
                    && *c == chain
                    && line.contains(&format!("-j {target}"))
                    && line.contains(&format!("\"{comment}\""))
                {
                    let ours = (table.to_string(), jump_rule(c, comment, target));
                    if !seen.jumps.contains(&ours) {
                        seen.jumps.push(ours);
                    }
                }
            }
        }
    }
}

/// Runs `iptables-restore --noflush` with `input`.
pub fn restore(backend: Backend, family: Family, input: &str) -> Result<(), Error> {
    let tool = backend.tool(family, "restore");
    let mut child = Command::new(&tool)
        .args(["--noflush", "--wait"])
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
        return Err(Error::Tool {
            program: tool,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Remembers, per family, the rules we last wrote and how `iptables-save` printed them, so
/// that reading them back can tell "unchanged" from "changed by someone else" whatever the
/// backend's printing quirks.
#[derive(Debug, Default)]
pub struct Written {
    by_family: BTreeMap<Family, (Rules, Vec<(String, String)>)>,
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

    #[test]
    fn parse_save_keeps_our_chains_and_finds_our_jumps() {
        let text = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:OTHER - [0:0]\n\
            -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A PREROUTING -j OTHER\n-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN\n-A OTHER -j ACCEPT\nCOMMIT\n";
        let mut seen = Seen::default();
        parse_save("nat", text, &mut seen);
        assert_eq!(
            seen.chains,
            BTreeSet::from([("nat".to_string(), "KUBE-SERVICES".to_string())])
        );
        assert_eq!(
            seen.rules,
            vec![(
                "nat".to_string(),
                "-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN".to_string()
            )]
        );
        assert_eq!(
            seen.jumps,
            vec![(
                "nat".to_string(),
                jump_rule("PREROUTING", "kubernetes service portals", "KUBE-SERVICES")
            )]
        );
    }
}
