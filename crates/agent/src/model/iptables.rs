//! The agent's iptables rules: kube-proxy IPVS mode's fixed set of KUBE-* chains and rules,
//! whose number does not grow with the number of Services (the sets carry the Services).
//!
//! Rules are written in `iptables-restore` form, table by table, in kube-proxy's order
//! (`writeIptablesRules`); a rule that matches a set is only written while that set has
//! entries, as kube-proxy does.

use std::collections::BTreeMap;

use super::cluster::Family;
use super::config::{LocalDetector, ProxyConfig};
use super::kernel::{Rules, Set};
use super::sets::{self, SetDef, set_name};

/// The agent's chains, by table.
pub const NAT_CHAINS: &[&str] = &[
    "KUBE-SERVICES",
    "KUBE-POSTROUTING",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-MARK-MASQ",
];
/// The agent's chains in the filter table.
pub const FILTER_CHAINS: &[&str] = &[
    "KUBE-FORWARD",
    "KUBE-NODE-PORT",
    "KUBE-PROXY-FIREWALL",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
];

/// Jumps from built-in chains: (table, chain, comment, target), prepended in this order.
pub const JUMPS: &[(&str, &str, &str, &str)] = &[
    (
        "nat",
        "OUTPUT",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "nat",
        "PREROUTING",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "nat",
        "POSTROUTING",
        "kubernetes postrouting rules",
        "KUBE-POSTROUTING",
    ),
    (
        "filter",
        "FORWARD",
        "kubernetes forwarding rules",
        "KUBE-FORWARD",
    ),
    (
        "filter",
        "INPUT",
        "kubernetes health check rules",
        "KUBE-NODE-PORT",
    ),
    (
        "filter",
        "INPUT",
        "kube-proxy firewall rules",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "filter",
        "FORWARD",
        "kube-proxy firewall rules",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "filter",
        "INPUT",
        "kubernetes ipvs access filter",
        "KUBE-IPVS-FILTER",
    ),
    (
        "filter",
        "OUTPUT",
        "kubernetes ipvs access filter",
        "KUBE-IPVS-OUT-FILTER",
    ),
];

/// The jump rule for one entry of [`JUMPS`], in `-A CHAIN ...` form.
pub fn jump_rule(chain: &str, comment: &str, target: &str) -> String {
    format!("-A {chain} -m comment --comment \"{comment}\" -j {target}")
}

/// A node-originated filter rule of `KUBE-IPVS-OUT-FILTER` (load-balancer source ranges that
/// do not include the node).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutFilter {
    /// The load-balancer IP.
    pub address: std::net::IpAddr,
    /// Its protocol.
    pub protocol: super::cluster::Protocol,
    /// Its port.
    pub port: u16,
}

/// Builds the rules of one family from the desired sets of that family.
pub fn rules(
    family: Family,
    config: &ProxyConfig,
    sets: &BTreeMap<String, Set>,
    out_filters: &[OutFilter],
) -> Rules {
    let name = |def: &SetDef| set_name(def, family);
    let has = |def: &SetDef| sets.get(&name(def)).is_some_and(|s| !s.entries.is_empty());
    let mark = format!("{:#x}", config.masquerade_mark());
    let mut nat: Vec<String> = Vec::new();
    let mut filter: Vec<String> = Vec::new();
    let set_rule = |chain: &str, pre: &str, def: &SetDef, dirs: &str, post: &str| {
        let pre = if pre.is_empty() {
            String::new()
        } else {
            format!("{pre} ")
        };
        let post = if post.is_empty() {
            String::new()
        } else {
            format!(" {post}")
        };
        format!(
            "-A {chain} {pre}-m comment --comment \"{comment}\" -m set --match-set {set} {dirs}{post}",
            comment = def.comment,
            set = name(def)
        )
    };

    // nat
    let loopback = match family {
        Family::V4 => "127.0.0.0/8",
        Family::V6 => "::1/128",
    };
    nat.push(format!("-A KUBE-SERVICES -s {loopback} -j RETURN"));
    if has(&sets::LOOP_BACK) {
        nat.push(set_rule(
            "KUBE-POSTROUTING",
            "",
            &sets::LOOP_BACK,
            "dst,dst,src",
            "-j MASQUERADE",
        ));
    }
    if has(&sets::LOAD_BALANCER) {
        nat.push(set_rule(
            "KUBE-SERVICES",
            "",
            &sets::LOAD_BALANCER,
            "dst,dst",
            "-j KUBE-LOAD-BALANCER",
        ));
    }
    if has(&sets::LOAD_BALANCER_LOCAL) {
        nat.push(set_rule(
            "KUBE-LOAD-BALANCER",
            "",
            &sets::LOAD_BALANCER_LOCAL,
            "dst,dst",
            "-j RETURN",
        ));
    }
    for (proto, local, all) in [
        ("tcp", &sets::NODE_PORT_LOCAL_TCP, &sets::NODE_PORT_TCP),
        ("udp", &sets::NODE_PORT_LOCAL_UDP, &sets::NODE_PORT_UDP),
    ] {
        if has(local) {
            nat.push(set_rule(
                "KUBE-NODE-PORT",
                &format!("-p {proto}"),
                local,
                "dst",
                "-j RETURN",
            ));
        }
        if has(all) {
            nat.push(set_rule(
                "KUBE-NODE-PORT",
                &format!("-p {proto}"),
                all,
                "dst",
                "-j KUBE-MARK-MASQ",
            ));
        }
    }
    if has(&sets::NODE_PORT_LOCAL_SCTP) {
        nat.push(set_rule(
            "KUBE-NODE-PORT",
            "-p sctp",
            &sets::NODE_PORT_LOCAL_SCTP,
            "dst,dst",
            "-j RETURN",
        ));
    }
    if has(&sets::NODE_PORT_SCTP) {
        nat.push(set_rule(
            "KUBE-NODE-PORT",
            "-p sctp",
            &sets::NODE_PORT_SCTP,
            "dst,dst",
            "-j KUBE-MARK-MASQ",
        ));
    }
    if has(&sets::CLUSTER_IP) {
        let rule = if config.masquerade_all {
            set_rule(
                "KUBE-SERVICES",
                "",
                &sets::CLUSTER_IP,
                "dst,dst",
                "-j KUBE-MARK-MASQ",
            )
        } else {
            match if_not_local(&config.local_detector, family) {
                Some(not_local) => set_rule(
                    "KUBE-SERVICES",
                    "",
                    &sets::CLUSTER_IP,
                    "dst,dst",
                    &format!("{not_local} -j KUBE-MARK-MASQ"),
                ),
                None => set_rule(
                    "KUBE-SERVICES",
                    "",
                    &sets::CLUSTER_IP,
                    "src,dst",
                    "-j KUBE-MARK-MASQ",
                ),
            }
        };
        nat.push(rule);
    }
    if has(&sets::EXTERNAL_IP) {
        nat.push(set_rule(
            "KUBE-SERVICES",
            "",
            &sets::EXTERNAL_IP,
            "dst,dst",
            "-j KUBE-MARK-MASQ",
        ));
        nat.push(set_rule(
            "KUBE-SERVICES",
            "",
            &sets::EXTERNAL_IP,
            "dst,dst",
            "-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT",
        ));
        nat.push(set_rule(
            "KUBE-SERVICES",
            "",
            &sets::EXTERNAL_IP,
            "dst,dst",
            "-m addrtype --dst-type LOCAL -j ACCEPT",
        ));
    }
    if has(&sets::EXTERNAL_IP_LOCAL) {
        nat.push(set_rule(
            "KUBE-SERVICES",
            "",
            &sets::EXTERNAL_IP_LOCAL,
            "dst,dst",
            "-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT",
        ));
        nat.push(set_rule(
            "KUBE-SERVICES",
            "",
            &sets::EXTERNAL_IP_LOCAL,
            "dst,dst",
            "-m addrtype --dst-type LOCAL -j ACCEPT",
        ));
    }
    nat.push("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT".into());
    nat.push("-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ".into());
    // These two must come last so that third-party rules cannot break IPVS traffic.
    if has(&sets::CLUSTER_IP) {
        nat.push(format!(
            "-A KUBE-SERVICES -m set --match-set {} dst,dst -j ACCEPT",
            name(&sets::CLUSTER_IP)
        ));
    }
    if has(&sets::LOAD_BALANCER) {
        nat.push(format!(
            "-A KUBE-SERVICES -m set --match-set {} dst,dst -j ACCEPT",
            name(&sets::LOAD_BALANCER)
        ));
    }
    nat.push(format!(
        "-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN"
    ));
    nat.push(format!("-A KUBE-POSTROUTING -j MARK --xor-mark {mark}"));
    let random_fully = if config.random_fully {
        " --random-fully"
    } else {
        ""
    };
    nat.push(format!(
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE{random_fully}"
    ));
    nat.push(format!("-A KUBE-MARK-MASQ -j MARK --or-mark {mark}"));

    // filter
    if has(&sets::LOAD_BALANCER_FW) {
        filter.push(set_rule(
            "KUBE-PROXY-FIREWALL",
            "",
            &sets::LOAD_BALANCER_FW,
            "dst,dst",
            "-j KUBE-SOURCE-RANGES-FIREWALL",
        ));
    }
    if has(&sets::LOAD_BALANCER_SOURCE_CIDR) {
        filter.push(set_rule(
            "KUBE-SOURCE-RANGES-FIREWALL",
            "",
            &sets::LOAD_BALANCER_SOURCE_CIDR,
            "dst,dst,src",
            "-j RETURN",
        ));
    }
    if has(&sets::LOAD_BALANCER_SOURCE_IP) {
        filter.push(set_rule(
            "KUBE-SOURCE-RANGES-FIREWALL",
            "",
            &sets::LOAD_BALANCER_SOURCE_IP,
            "dst,dst,src",
            "-j RETURN",
        ));
    }
    filter.push("-A KUBE-SOURCE-RANGES-FIREWALL -j DROP".into());
    for f in out_filters {
        filter.push(format!(
            "-A KUBE-IPVS-OUT-FILTER -s {a} -m ipvs --vaddr {a} --vproto {p} --vport {port} -j DROP",
            a = f.address,
            p = f.protocol,
            port = f.port
        ));
    }
    filter.push(format!(
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT"
    ));
    filter.push(
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"
            .into(),
    );
    filter.push(set_rule(
        "KUBE-NODE-PORT",
        "",
        &sets::HEALTH_CHECK_NODE_PORT,
        "dst",
        "-j ACCEPT",
    ));
    for def in [
        &sets::LOAD_BALANCER,
        &sets::CLUSTER_IP,
        &sets::EXTERNAL_IP,
        &sets::EXTERNAL_IP_LOCAL,
    ] {
        filter.push(format!(
            "-A KUBE-IPVS-FILTER -m set --match-set {} dst,dst -j RETURN",
            name(def)
        ));
    }
    filter.push(format!(
        "-A KUBE-IPVS-FILTER -m set --match-set {} dst -j RETURN",
        name(&sets::HEALTH_CHECK_NODE_PORT)
    ));
    filter.push(format!(
        "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set {} dst -j REJECT",
        name(&sets::IPVS_IPS)
    ));

    let mut out = Rules::default();
    for c in NAT_CHAINS {
        out.chains.insert(("nat".into(), (*c).into()));
    }
    for c in FILTER_CHAINS {
        out.chains.insert(("filter".into(), (*c).into()));
    }
    out.rules
        .extend(nat.into_iter().map(|r| ("nat".to_string(), r)));
    out.rules
        .extend(filter.into_iter().map(|r| ("filter".to_string(), r)));
    out.jumps = JUMPS
        .iter()
        .map(|(table, chain, comment, target)| {
            ((*table).to_string(), jump_rule(chain, comment, target))
        })
        .collect();
    out
}

/// The negated "comes from a pod" match of the local detector, when it has one for `family`.
fn if_not_local(detector: &LocalDetector, family: Family) -> Option<String> {
    let cidr_of = |cidrs: &[ipnet::IpNet]| {
        cidrs
            .iter()
            .find(|c| super::cluster::Family::of(&c.addr()) == family)
            .map(|c| format!("! -s {c}"))
    };
    match detector {
        LocalDetector::None => None,
        LocalDetector::ClusterCidr(c) | LocalDetector::NodeCidr(c) => cidr_of(c),
        LocalDetector::BridgeInterface(i) => Some(format!("! -i {i}")),
        LocalDetector::InterfaceNamePrefix(p) => Some(format!("! -i {p}+")),
    }
}

/// The `iptables-restore --noflush` input that makes the kernel hold `rules`: every chain of
/// the agent declared (which flushes it) and refilled, and each jump in `missing_jumps`
/// prepended to its built-in chain.
pub fn restore_input(rules: &Rules, missing_jumps: &[(String, String)]) -> String {
    let mut out = String::new();
    for table in ["nat", "filter"] {
        out.push_str(&format!("*{table}\n"));
        for (t, chain) in &rules.chains {
            if t == table {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
        }
        for (t, rule) in &rules.rules {
            if t == table {
                out.push_str(rule);
                out.push('\n');
            }
        }
        for (t, jump) in missing_jumps {
            if t == table {
                // "-A CHAIN rest" -> "-I CHAIN 1 rest"
                if let Some(rest) = jump.strip_prefix("-A ") {
                    let (chain, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                    out.push_str(&format!("-I {chain} 1 {tail}\n"));
                }
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// The `iptables-restore --noflush` input that removes the agent's jumps and chains: each jump
/// deleted, then each chain flushed (by declaring it) and deleted.
pub fn removal_input(rules: &Rules) -> String {
    let mut out = String::new();
    for table in ["nat", "filter"] {
        out.push_str(&format!("*{table}\n"));
        for (t, chain) in &rules.chains {
            if t == table {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
        }
        for (t, jump) in &rules.jumps {
            if t == table
                && let Some(rest) = jump.strip_prefix("-A ")
            {
                out.push_str(&format!("-D {rest}\n"));
            }
        }
        for (t, chain) in &rules.chains {
            if t == table {
                out.push_str(&format!("-X {chain}\n"));
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// Rules of each `(table, chain)` in a canonical form, so that rules as written and rules as
/// `iptables-save` prints them compare equal: address, interface and protocol options first,
/// `MARK --or-mark/--xor-mark` as `--set-xmark`, REJECT with its default `--reject-with`.
pub fn canonical(rules: &Rules, family: Family) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (table, chain) in &rules.chains {
        out.entry((table.clone(), chain.clone())).or_default();
    }
    for (table, rule) in &rules.rules {
        let Some((chain, line)) = canonical_rule(rule, family) else {
            continue;
        };
        out.entry((table.clone(), chain)).or_default().push(line);
    }
    out
}

fn canonical_rule(rule: &str, family: Family) -> Option<(String, String)> {
    let tokens = split_words(rule);
    let mut it = tokens.iter();
    if it.next().map(String::as_str) != Some("-A") {
        return None;
    }
    let chain = it.next()?.clone();
    let rest: Vec<String> = it.cloned().collect();
    // Pull `[!] -s X`, `[!] -d X`, `[!] -i X`, `[!] -o X`, `[!] -p X` to the front, in that order.
    let mut front: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut others: Vec<String> = Vec::new();
    let order = ["-s", "-d", "-i", "-o", "-p"];
    let mut i = 0;
    while i < rest.len() {
        let negated = rest[i] == "!" && i + 1 < rest.len() && order.contains(&rest[i + 1].as_str());
        let at = if negated { i + 1 } else { i };
        if let Some(pos) = order.iter().position(|o| *o == rest[at])
            && at + 1 < rest.len()
        {
            let mut words = Vec::new();
            if negated {
                words.push("!".to_string());
            }
            words.push(rest[at].clone());
            words.push(rest[at + 1].clone());
            front.insert(pos, words);
            i = at + 2;
            continue;
        }
        others.push(rest[i].clone());
        i += 1;
    }
    let mut words: Vec<String> = front.into_values().flatten().collect();
    // Targets: MARK shorthands and REJECT's default.
    let mut j = 0;
    while j < others.len() {
        match others[j].as_str() {
            "--or-mark" if j + 1 < others.len() => {
                let m = mark_hex(&others[j + 1]);
                words.push("--set-xmark".into());
                words.push(format!("{m}/{m}"));
                j += 2;
            }
            "--xor-mark" if j + 1 < others.len() => {
                let m = mark_hex(&others[j + 1]);
                words.push("--set-xmark".into());
                words.push(format!("{m}/0x0"));
                j += 2;
            }
            "--mark" if j + 1 < others.len() => {
                words.push("--mark".into());
                words.push(
                    others[j + 1]
                        .split('/')
                        .map(mark_hex)
                        .collect::<Vec<_>>()
                        .join("/"),
                );
                j += 2;
            }
            _ => {
                words.push(others[j].clone());
                j += 1;
            }
        }
    }
    if words.last().is_some_and(|w| w == "REJECT") {
        words.push("--reject-with".into());
        words.push(
            match family {
                Family::V4 => "icmp-port-unreachable",
                Family::V6 => "icmp6-port-unreachable",
            }
            .into(),
        );
    }
    Some((chain, words.join(" ")))
}

/// `0x04000` and `16384` both as `0x4000`.
fn mark_hex(s: &str) -> String {
    let v = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    };
    v.map(|v| format!("{v:#x}"))
        .unwrap_or_else(|| s.to_string())
}

/// Splits a rule into words, keeping `"quoted comments"` whole (quotes included).
fn split_words(rule: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in rule.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ' ' if !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::{Set, SetEntry, SetKind};
    use std::collections::BTreeSet;

    fn sets_with(names: &[&SetDef]) -> BTreeMap<String, Set> {
        names
            .iter()
            .map(|d| {
                let entry = match d.kind {
                    SetKind::BitmapPort => SetEntry::Port(30000),
                    _ => SetEntry::Ip("10.0.0.1".parse().unwrap()),
                };
                (
                    d.name.to_string(),
                    Set {
                        kind: d.kind,
                        family: Family::V4,
                        entries: BTreeSet::from([entry]),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn rule_count_does_not_grow_with_services_and_tracks_non_empty_sets() {
        let config = ProxyConfig::default();
        let empty = rules(Family::V4, &config, &BTreeMap::new(), &[]);
        let full = rules(
            Family::V4,
            &config,
            &sets_with(&[&sets::CLUSTER_IP, &sets::LOOP_BACK]),
            &[],
        );
        // Two sets gained entries: the LOOP-BACK masquerade, the ClusterIP mark and the final ACCEPT.
        assert_eq!(full.rules.len(), empty.rules.len() + 3);
        assert!(full.rules.iter().any(|(t, r)| t == "nat"
            && r == "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ"));
    }

    #[test]
    fn masquerade_mark_follows_the_bit() {
        let config = ProxyConfig {
            masquerade_bit: 3,
            ..ProxyConfig::default()
        };
        let r = rules(Family::V4, &config, &BTreeMap::new(), &[]);
        assert!(
            r.rules
                .iter()
                .any(|(_, r)| r == "-A KUBE-MARK-MASQ -j MARK --or-mark 0x8")
        );
    }

    #[test]
    fn local_detector_and_masquerade_all_pick_the_cluster_ip_rule() {
        let sets = sets_with(&[&sets::CLUSTER_IP]);
        let detect = ProxyConfig {
            local_detector: LocalDetector::ClusterCidr(vec!["10.244.0.0/16".parse().unwrap()]),
            ..ProxyConfig::default()
        };
        let r = rules(Family::V4, &detect, &sets, &[]);
        assert!(r.rules.iter().any(|(_, r)| {
            r.ends_with("KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ")
        }));
        let all = ProxyConfig {
            masquerade_all: true,
            ..detect
        };
        let r = rules(Family::V4, &all, &sets, &[]);
        assert!(
            r.rules
                .iter()
                .any(|(_, r)| r.ends_with("KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"))
        );
    }

    #[test]
    fn canonical_form_matches_what_iptables_save_prints() {
        // Lines as iptables-save (nft and legacy) printed them in the lab for our rules.
        let saved = Rules {
            chains: Default::default(),
            rules: vec![
                ("nat".into(), "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000".into()),
                ("nat".into(), "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0".into()),
                ("nat".into(), "-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ".into()),
                ("filter".into(), "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable".into()),
            ],
            jumps: vec![],
        };
        let written = Rules {
            chains: Default::default(),
            rules: vec![
                ("nat".into(), "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000".into()),
                ("nat".into(), "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000".into()),
                ("nat".into(), "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ".into()),
                ("filter".into(), "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT".into()),
            ],
            jumps: vec![],
        };
        assert_eq!(
            canonical(&saved, Family::V4),
            canonical(&written, Family::V4)
        );
        let mut other = written.clone();
        other.rules[0].1 = "-A KUBE-MARK-MASQ -j MARK --or-mark 0x8000".into();
        assert_ne!(canonical(&saved, Family::V4), canonical(&other, Family::V4));
    }

    #[test]
    fn restore_input_declares_every_chain_and_prepends_missing_jumps() {
        let r = rules(Family::V4, &ProxyConfig::default(), &BTreeMap::new(), &[]);
        let text = restore_input(&r, &r.jumps[..1]);
        assert!(text.starts_with("*nat\n"));
        assert!(text.contains(":KUBE-MARK-MASQ - [0:0]\n"));
        assert!(text.contains(
            "-I OUTPUT 1 -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n"
        ));
        assert_eq!(text.matches("COMMIT\n").count(), 2);
    }
}
