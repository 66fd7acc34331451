//! What kube-proxy's other modes leave on a node that the agent takes over, and the
//! `iptables-restore --noflush` input that removes it.
//!
//! A stock cluster runs kube-proxy in iptables (or nftables) mode. Stopping it leaves its rules
//! in place, and some of them go on acting on an IPVS node: the filter table's `KUBE-SERVICES`
//! and `KUBE-EXTERNAL-SERVICES` REJECT traffic to Services that had no endpoints then, and
//! `KUBE-NODEPORTS` accepts health-check ports that may have moved. kube-proxy in IPVS mode
//! deletes nftables mode's `kube-proxy` tables when it starts; the agent does that too, and
//! also removes the chains only iptables mode makes (its `CleanupLeftovers` list, less what
//! IPVS mode shares with it: nat `KUBE-SERVICES`, `KUBE-POSTROUTING`, `KUBE-MARK-MASQ`, filter
//! `KUBE-FORWARD`, `KUBE-PROXY-FIREWALL`, which the agent rewrites as its own).
//!
//! The plan is computed from `iptables-save` text alone, so it is tested without a kernel.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::kernel::chains::{FILTER_CHAINS, NAT_CHAINS};

/// Chains only kube-proxy's iptables mode makes, by table (exact names).
const IPTABLES_MODE_CHAINS: &[(&str, &str)] = &[
    ("nat", "KUBE-NODEPORTS"),
    ("nat", "KUBE-PROXY-CANARY"),
    ("filter", "KUBE-SERVICES"),
    ("filter", "KUBE-EXTERNAL-SERVICES"),
    ("filter", "KUBE-NODEPORTS"),
    ("filter", "KUBE-PROXY-CANARY"),
    ("mangle", "KUBE-PROXY-CANARY"),
];

/// Prefixes of iptables mode's per-Service and per-endpoint chains (nat table): cluster and
/// local policy, endpoint, load-balancer firewall and external chains.
const IPTABLES_MODE_PREFIXES: &[&str] = &[
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-SEP-",
    "KUBE-FW-",
    "KUBE-EXT-",
];

/// The comment of iptables mode's jumps to the shared `KUBE-PROXY-FIREWALL` chain (IPVS mode's
/// say "kube-proxy firewall rules", and come from other built-in chains).
const IPTABLES_MODE_FIREWALL_COMMENT: &str = "\"kubernetes load balancer firewall\"";

/// The tables nftables mode makes, one per family (`nft delete table FAMILY kube-proxy`).
pub const NFTABLES_MODE_TABLE: &str = "kube-proxy";

const BUILT_IN: &[&str] = &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/// What to remove of iptables mode in one family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sweep {
    /// `(table, chain)` of iptables mode's chains to flush and delete.
    pub chains: Vec<(String, String)>,
    /// `(table, rule)` of iptables mode's jumps from built-in chains, as `iptables-save`
    /// printed them (`-A INPUT ...`).
    pub jumps: Vec<(String, String)>,
    /// `(table, chain, referring chain)` of iptables mode's chains left in place because a
    /// chain that is not iptables mode's still jumps to them.
    pub kept: Vec<(String, String, String)>,
}

impl Sweep {
    /// Whether there is nothing to remove.
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.jumps.is_empty()
    }

    /// Whether a kept chain waits for one of the agent's own chains to be rewritten (after the
    /// agent's first write, nat `KUBE-SERVICES` no longer jumps to `KUBE-SVC-*`).
    pub fn waits_for_the_agent(&self) -> bool {
        self.kept.iter().any(|(table, _, from)| agents(table, from))
    }

    /// The `iptables-restore --noflush` input: each chain flushed (declared), each jump
    /// deleted, then each chain deleted; one COMMIT per table touched.
    pub fn restore_input(&self) -> String {
        let mut out = String::new();
        for table in ["nat", "filter", "mangle"] {
            let chains: Vec<&String> = self
                .chains
                .iter()
                .filter(|(t, _)| t == table)
                .map(|(_, c)| c)
                .collect();
            let jumps: Vec<&String> = self
                .jumps
                .iter()
                .filter(|(t, _)| t == table)
                .map(|(_, r)| r)
                .collect();
            if chains.is_empty() && jumps.is_empty() {
                continue;
            }
            out.push_str(&format!("*{table}\n"));
            for chain in &chains {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
            for jump in &jumps {
                if let Some(rest) = jump.strip_prefix("-A ") {
                    out.push_str(&format!("-D {rest}\n"));
                }
            }
            for chain in &chains {
                out.push_str(&format!("-X {chain}\n"));
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

fn agents(table: &str, chain: &str) -> bool {
    match table {
        "nat" => NAT_CHAINS.contains(&chain),
        "filter" => FILTER_CHAINS.contains(&chain),
        _ => false,
    }
}

/// Whether `chain` of `table` is one only kube-proxy's iptables mode makes.
pub fn iptables_mode_chain(table: &str, chain: &str) -> bool {
    IPTABLES_MODE_CHAINS.contains(&(table, chain))
        || (table == "nat" && IPTABLES_MODE_PREFIXES.iter().any(|p| chain.starts_with(p)))
}

/// The chain a rule jumps or goes to (`-j X`, `-g X`), if any.
fn target(rule: &str) -> Option<&str> {
    let mut words = rule.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-j" || w == "-g" {
            return words.next();
        }
    }
    None
}

/// What of iptables mode to remove, from the full `iptables-save` output of one family (every
/// table, `*table` sections). A chain of iptables mode that a chain other than iptables
/// mode's still jumps to is kept (deleting it would fail the whole table's transaction), with
/// the chains it jumps to in turn.
pub fn sweep(save: &str) -> Sweep {
    // (table) -> chains, and (table, chain) -> the rules in it.
    let mut chains: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut rules: Vec<(String, String, String)> = Vec::new(); // (table, chain, rule)
    let mut table = String::new();
    for line in save.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split_whitespace().next().unwrap_or("");
            chains
                .entry(table.clone())
                .or_default()
                .insert(chain.to_string());
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or("").to_string();
            rules.push((table.clone(), chain, line.to_string()));
        }
    }

    let mut candidates: BTreeSet<(String, String)> = chains
        .iter()
        .flat_map(|(t, cs)| cs.iter().map(move |c| (t.clone(), c.clone())))
        .filter(|(t, c)| iptables_mode_chain(t, c))
        .collect();
    // A jump from a built-in chain to a candidate is iptables mode's and goes with it; a jump
    // from any other chain that stays keeps the candidate, until nothing changes.
    let mut kept = Vec::new();
    loop {
        let blocked: Vec<(String, String, String)> = rules
            .iter()
            .filter(|(t, from, _)| {
                !BUILT_IN.contains(&from.as_str())
                    && !candidates.contains(&(t.clone(), from.clone()))
            })
            .filter_map(|(t, from, rule)| {
                let to = target(rule)?;
                candidates
                    .contains(&(t.clone(), to.to_string()))
                    .then(|| (t.clone(), to.to_string(), from.clone()))
            })
            .collect();
        if blocked.is_empty() {
            break;
        }
        for (t, to, from) in blocked {
            if candidates.remove(&(t.clone(), to.clone())) {
                kept.push((t, to, from));
            }
        }
    }

    let jumps = rules
        .iter()
        .filter(|(t, from, rule)| {
            BUILT_IN.contains(&from.as_str())
                && target(rule).is_some_and(|to| {
                    candidates.contains(&(t.clone(), to.to_string()))
                        || (t == "filter"
                            && to == "KUBE-PROXY-FIREWALL"
                            && rule.contains(IPTABLES_MODE_FIREWALL_COMMENT))
                })
        })
        .map(|(t, _, rule)| (t.clone(), rule.clone()))
        .collect();
    Sweep {
        chains: candidates.into_iter().collect(),
        jumps,
        kept,
    }
}

/// The tables of `nft list tables` output that nftables mode made for `family` (`ip` or
/// `ip6`): the `FAMILY kube-proxy` table, when listed.
pub fn nftables_mode_table(list_tables: &str, family: &str) -> bool {
    list_tables.lines().any(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words == ["table", family, NFTABLES_MODE_TABLE]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kube-proxy v1.33 in iptables mode left on a node with one ClusterIP Service with
    /// one endpoint, one without endpoints and one NodePort (`iptables-save`, shortened to the
    /// kinds of rules it holds), beside Docker's and kubelet's chains.
    const IPTABLES_MODE: &str = r#"*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-USER - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A FORWARD -j DOCKER-USER
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-SERVICES -d 10.96.0.20/32 -p tcp -m comment --comment "default/empty:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-EXT-ABCDEFGHIJKLMNOP - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SEP-QRSTUVWXYZ234567 - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-EXT-ABCDEFGHIJKLMNOP -m comment --comment "masquerade traffic for default/web:http external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-ABCDEFGHIJKLMNOP -j KUBE-SVC-ABCDEFGHIJKLMNOP
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODEPORTS -p tcp -m comment --comment "default/web:http" -m tcp --dport 30080 -j KUBE-EXT-ABCDEFGHIJKLMNOP
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-SEP-QRSTUVWXYZ234567 -s 10.244.1.5/32 -m comment --comment "default/web:http" -j KUBE-MARK-MASQ
-A KUBE-SEP-QRSTUVWXYZ234567 -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 10.244.1.5:8080
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ABCDEFGHIJKLMNOP
-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-ABCDEFGHIJKLMNOP -m comment --comment "default/web:http -> 10.244.1.5:8080" -j KUBE-SEP-QRSTUVWXYZ234567
COMMIT
"#;

    fn pairs(v: &[(String, String)]) -> Vec<(&str, &str)> {
        v.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
    }

    #[test]
    fn iptables_modes_own_chains_go_and_the_shared_ones_stay() {
        let s = sweep(IPTABLES_MODE);
        assert_eq!(
            pairs(&s.chains),
            [
                ("filter", "KUBE-EXTERNAL-SERVICES"),
                ("filter", "KUBE-NODEPORTS"),
                ("filter", "KUBE-PROXY-CANARY"),
                ("filter", "KUBE-SERVICES"),
                ("mangle", "KUBE-PROXY-CANARY"),
                ("nat", "KUBE-PROXY-CANARY"),
            ],
            "nat's per-Service chains wait: the agent's KUBE-SERVICES still jumps to them"
        );
        assert!(s.waits_for_the_agent());
        let kept: Vec<&str> = s.kept.iter().map(|(_, c, _)| c.as_str()).collect();
        assert_eq!(
            kept,
            [
                "KUBE-SVC-ABCDEFGHIJKLMNOP",
                "KUBE-NODEPORTS",
                "KUBE-EXT-ABCDEFGHIJKLMNOP",
                "KUBE-SEP-QRSTUVWXYZ234567"
            ]
        );
        // Kubelet's, Docker's and the shared chains' jumps stay; iptables mode's go.
        let jumps: Vec<&str> = s.jumps.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(jumps.len(), 8, "{jumps:#?}");
        assert!(jumps.iter().all(|j| !j.contains("KUBE-FIREWALL")
            && !j.contains("DOCKER-USER")
            && !j.contains("KUBE-FORWARD")));
    }

    #[test]
    fn once_the_agent_rewrote_its_chains_every_iptables_mode_chain_goes() {
        // What the save shows after the agent's restore rewrote nat KUBE-SERVICES.
        let after: String = IPTABLES_MODE
            .lines()
            .filter(|l| {
                !l.starts_with("-A KUBE-SERVICES -d 10.96.0.10/32")
                    && !l.contains("dst-type LOCAL -j KUBE-NODEPORTS")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let s = sweep(&after);
        assert!(s.kept.is_empty(), "{:?}", s.kept);
        assert!(!s.waits_for_the_agent());
        let nat: Vec<&str> = s
            .chains
            .iter()
            .filter(|(t, _)| t == "nat")
            .map(|(_, c)| c.as_str())
            .collect();
        assert_eq!(
            nat,
            [
                "KUBE-EXT-ABCDEFGHIJKLMNOP",
                "KUBE-NODEPORTS",
                "KUBE-PROXY-CANARY",
                "KUBE-SEP-QRSTUVWXYZ234567",
                "KUBE-SVC-ABCDEFGHIJKLMNOP"
            ]
        );
        let input = s.restore_input();
        assert!(
            input.contains("*nat\n:KUBE-EXT-ABCDEFGHIJKLMNOP - [0:0]\n"),
            "{input}"
        );
        assert!(input.contains("-X KUBE-SVC-ABCDEFGHIJKLMNOP\n"), "{input}");
        assert!(input.contains(
            "-D INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n"
        ));
        // Declarations (flushes) before deletions, in each table.
        let filter = &input[input.find("*filter").unwrap()..];
        assert!(filter.find(":KUBE-SERVICES").unwrap() < filter.find("-D ").unwrap());
        assert!(filter.find("-D ").unwrap() < filter.find("-X ").unwrap());
    }

    #[test]
    fn a_node_without_iptables_mode_has_nothing_to_sweep() {
        let ipvs_node = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODE-PORT - [0:0]\n\
            -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT\nCOMMIT\n\
            *filter\n:KUBE-PROXY-FIREWALL - [0:0]\n\
            -A INPUT -m comment --comment \"kube-proxy firewall rules\" -j KUBE-PROXY-FIREWALL\nCOMMIT\n";
        let s = sweep(ipvs_node);
        assert!(s.is_empty(), "{s:?}");
        assert_eq!(s.restore_input(), "");
    }

    #[test]
    fn a_chain_another_program_jumps_to_is_kept_with_what_it_jumps_to() {
        let save = "*nat\n:MINE - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-B - [0:0]\n:KUBE-SEP-C - [0:0]\n\
            -A MINE -j KUBE-SVC-A\n-A KUBE-SVC-A -j KUBE-SEP-B\nCOMMIT\n";
        let s = sweep(save);
        assert_eq!(pairs(&s.chains), [("nat", "KUBE-SEP-C")]);
        assert!(!s.waits_for_the_agent());
        assert_eq!(s.kept.len(), 2);
    }

    #[test]
    fn no_chain_of_the_agent_is_iptables_modes() {
        for c in NAT_CHAINS {
            assert!(!iptables_mode_chain("nat", c), "{c}");
        }
        for c in FILTER_CHAINS {
            assert!(!iptables_mode_chain("filter", c), "{c}");
        }
    }

    #[test]
    fn nftables_modes_table_is_found_by_family() {
        let list =
            "table ip filter\ntable ip kube-proxy\ntable inet mine\ntable ip6 kube-proxy-x\n";
        assert!(nftables_mode_table(list, "ip"));
        assert!(!nftables_mode_table(list, "ip6"));
        assert!(!nftables_mode_table("table inet kube-proxy\n", "ip"));
    }
}
