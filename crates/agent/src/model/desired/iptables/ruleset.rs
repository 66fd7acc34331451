//! The rules of one family: kube-proxy's fixed table, with one function per feature for the
//! rules that come and go with the sets they match.
//!
//! The order is kube-proxy's (`writeIptablesRules`), which interleaves the features; [`rules`]
//! lists the pieces in that order, so a feature's rules may sit in two places.

use std::collections::BTreeMap;

use super::OutFilter;
use crate::model::kernel::chains::JUMPS;
use crate::model::kernel::sets::{self, SetDef, SetName};
use crate::model::kernel::{Rules, Set, Table};
use crate::model::snapshot::cluster::Family;
use crate::model::snapshot::config::{LocalDetector, ProxyConfig};

/// Local-destined traffic that no VIP rule took may be for a node port.
const TO_NODE_PORTS: &str = "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT";
/// Load-balancer traffic that no Local rule returned is masqueraded.
const MARK_LOAD_BALANCER: &str = "-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ";
/// Once no source range let a packet through, it goes no further.
const DROP_OUT_OF_RANGE: &str = "-A KUBE-SOURCE-RANGES-FIREWALL -j DROP";
/// Replies of forwarded connections pass whatever the FORWARD policy says.
const FORWARD_ESTABLISHED: &str = "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT";

/// Builds the rules of one family from the desired sets of that family.
pub fn rules(
    family: Family,
    config: &ProxyConfig,
    sets: &BTreeMap<SetName, Set>,
    out_filters: &[OutFilter],
) -> Rules {
    let sets = FamilySets { family, sets };
    let mark = format!("{:#x}", config.masquerade_mark());
    let nat = [
        vec![loopback_return(family)],
        hairpin(&sets),
        load_balancer(&sets),
        node_ports(&sets),
        cluster_ip_masquerade(&sets, config),
        external_ips(&sets),
        vec![TO_NODE_PORTS.into(), MARK_LOAD_BALANCER.into()],
        // These come last in KUBE-SERVICES so that third-party rules cannot break IPVS traffic.
        vip_accepts(&sets),
        masquerade(&mark, config.random_fully),
    ]
    .concat();
    let filter = [
        source_ranges(&sets, out_filters),
        forward(&mark),
        vec![health_check_accept(&sets)],
        ipvs_filter(&sets),
    ]
    .concat();
    assemble(nat, filter)
}

/// The desired sets of one family, as the rules name and match them.
struct FamilySets<'a> {
    family: Family,
    sets: &'a BTreeMap<SetName, Set>,
}

impl FamilySets<'_> {
    fn name(&self, def: &SetDef) -> SetName {
        SetName::new(def, self.family)
    }

    /// Whether the set has entries: a rule that matches an empty set is not written, as
    /// kube-proxy leaves it out.
    fn filled(&self, def: &SetDef) -> bool {
        self.sets
            .get(&self.name(def))
            .is_some_and(|s| !s.entries.is_empty())
    }

    /// `-A chain [pre] <the set's comment> -m set --match-set <set> dirs [post]`.
    fn rule(&self, chain: &str, pre: &str, def: &SetDef, dirs: &str, post: &str) -> String {
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
            set = self.name(def)
        )
    }

    /// [`Self::rule`] when the set has entries.
    fn rule_if_filled(
        &self,
        chain: &str,
        pre: &str,
        def: &SetDef,
        dirs: &str,
        post: &str,
    ) -> Option<String> {
        self.filled(def)
            .then(|| self.rule(chain, pre, def, dirs, post))
    }
}

/// The node's own loopback traffic is never a Service's.
fn loopback_return(family: Family) -> String {
    let loopback = match family {
        Family::V4 => "127.0.0.0/8",
        Family::V6 => "::1/128",
    };
    format!("-A KUBE-SERVICES -s {loopback} -j RETURN")
}

/// Hairpin: a pod that reaches itself through its Service is masqueraded, or it would answer
/// itself directly and the client would drop the reply.
fn hairpin(sets: &FamilySets) -> Vec<String> {
    sets.rule_if_filled(
        "KUBE-POSTROUTING",
        "",
        &sets::LOOP_BACK,
        "dst,dst,src",
        "-j MASQUERADE",
    )
    .into_iter()
    .collect()
}

/// Load-balancer IPs go to `KUBE-LOAD-BALANCER`, which returns the Local ones unmarked (the
/// client's address must survive).
fn load_balancer(sets: &FamilySets) -> Vec<String> {
    [
        sets.rule_if_filled(
            "KUBE-SERVICES",
            "",
            &sets::LOAD_BALANCER,
            "dst,dst",
            "-j KUBE-LOAD-BALANCER",
        ),
        sets.rule_if_filled(
            "KUBE-LOAD-BALANCER",
            "",
            &sets::LOAD_BALANCER_LOCAL,
            "dst,dst",
            "-j RETURN",
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Node ports are masqueraded unless Local: TCP and UDP match the port alone (bitmap sets),
/// SCTP the node address too (kube-proxy keeps SCTP in hash sets).
fn node_ports(sets: &FamilySets) -> Vec<String> {
    let mut out = Vec::new();
    for (proto, local, all) in [
        ("tcp", &sets::NODE_PORT_LOCAL_TCP, &sets::NODE_PORT_TCP),
        ("udp", &sets::NODE_PORT_LOCAL_UDP, &sets::NODE_PORT_UDP),
        ("sctp", &sets::NODE_PORT_LOCAL_SCTP, &sets::NODE_PORT_SCTP),
    ] {
        let pre = format!("-p {proto}");
        let dirs = if proto == "sctp" { "dst,dst" } else { "dst" };
        out.extend(sets.rule_if_filled("KUBE-NODE-PORT", &pre, local, dirs, "-j RETURN"));
        out.extend(sets.rule_if_filled("KUBE-NODE-PORT", &pre, all, dirs, "-j KUBE-MARK-MASQ"));
    }
    out
}

/// Cluster IPs are masqueraded for everyone with `--masquerade-all`, else for what the local
/// detector says does not come from a pod, else for node-originated traffic with a VIP source.
fn cluster_ip_masquerade(sets: &FamilySets, config: &ProxyConfig) -> Vec<String> {
    if !sets.filled(&sets::CLUSTER_IP) {
        return Vec::new();
    }
    let (dirs, post) = if config.masquerade_all {
        ("dst,dst", "-j KUBE-MARK-MASQ".to_string())
    } else {
        match if_not_local(&config.local_detector, sets.family) {
            Some(not_local) => ("dst,dst", format!("{not_local} -j KUBE-MARK-MASQ")),
            None => ("src,dst", "-j KUBE-MARK-MASQ".to_string()),
        }
    };
    vec![sets.rule("KUBE-SERVICES", "", &sets::CLUSTER_IP, dirs, &post)]
}

/// The negated "comes from a pod" match of the local detector, when it has one for `family`.
fn if_not_local(detector: &LocalDetector, family: Family) -> Option<String> {
    let cidr_of = |cidrs: &[ipnet::IpNet]| {
        cidrs
            .iter()
            .find(|c| Family::of(&c.addr()) == family)
            .map(|c| format!("! -s {c}"))
    };
    match detector {
        LocalDetector::None => None,
        LocalDetector::ClusterCidr(c) | LocalDetector::NodeCidr(c) => cidr_of(c),
        LocalDetector::BridgeInterface(i) => Some(format!("! -i {i}")),
        LocalDetector::InterfaceNamePrefix(p) => Some(format!("! -i {p}+")),
    }
}

/// External IPs: masqueraded unless Local, and accepted at once (past the node-port rules)
/// when they come neither from a bridge (a pod) nor from a local process, or are for one of
/// the node's own addresses.
fn external_ips(sets: &FamilySets) -> Vec<String> {
    const FROM_OUTSIDE: &str =
        "-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT";
    const TO_THE_NODE: &str = "-m addrtype --dst-type LOCAL -j ACCEPT";
    let mut out = Vec::new();
    if sets.filled(&sets::EXTERNAL_IP) {
        for post in ["-j KUBE-MARK-MASQ", FROM_OUTSIDE, TO_THE_NODE] {
            out.push(sets.rule("KUBE-SERVICES", "", &sets::EXTERNAL_IP, "dst,dst", post));
        }
    }
    if sets.filled(&sets::EXTERNAL_IP_LOCAL) {
        for post in [FROM_OUTSIDE, TO_THE_NODE] {
            out.push(sets.rule(
                "KUBE-SERVICES",
                "",
                &sets::EXTERNAL_IP_LOCAL,
                "dst,dst",
                post,
            ));
        }
    }
    out
}

/// Cluster and load-balancer VIPs are accepted before anything else can touch them.
fn vip_accepts(sets: &FamilySets) -> Vec<String> {
    [&sets::CLUSTER_IP, &sets::LOAD_BALANCER]
        .into_iter()
        .filter(|def| sets.filled(def))
        .map(|def| {
            format!(
                "-A KUBE-SERVICES -m set --match-set {} dst,dst -j ACCEPT",
                sets.name(def)
            )
        })
        .collect()
}

/// Marked traffic is masqueraded on the way out, its mark cleared first so that it is not
/// masqueraded twice.
fn masquerade(mark: &str, random_fully: bool) -> Vec<String> {
    let random_fully = if random_fully { " --random-fully" } else { "" };
    vec![
        format!("-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN"),
        format!("-A KUBE-POSTROUTING -j MARK --xor-mark {mark}"),
        format!(
            "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE{random_fully}"
        ),
        format!("-A KUBE-MARK-MASQ -j MARK --or-mark {mark}"),
    ]
}

/// Load-balancer source ranges: a ranged LB IP lets in the ranges (and the node, when a range
/// holds its IP) and drops the rest; the node's own traffic to it is dropped on the way out
/// when no range holds the node (`out_filters`).
fn source_ranges(sets: &FamilySets, out_filters: &[OutFilter]) -> Vec<String> {
    let mut out: Vec<String> = [
        sets.rule_if_filled(
            "KUBE-PROXY-FIREWALL",
            "",
            &sets::LOAD_BALANCER_FW,
            "dst,dst",
            "-j KUBE-SOURCE-RANGES-FIREWALL",
        ),
        sets.rule_if_filled(
            "KUBE-SOURCE-RANGES-FIREWALL",
            "",
            &sets::LOAD_BALANCER_SOURCE_CIDR,
            "dst,dst,src",
            "-j RETURN",
        ),
        sets.rule_if_filled(
            "KUBE-SOURCE-RANGES-FIREWALL",
            "",
            &sets::LOAD_BALANCER_SOURCE_IP,
            "dst,dst,src",
            "-j RETURN",
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    out.push(DROP_OUT_OF_RANGE.into());
    out.extend(out_filters.iter().map(|f| {
        format!(
            "-A KUBE-IPVS-OUT-FILTER -s {a} -m ipvs --vaddr {a} --vproto {p} --vport {port} -j DROP",
            a = f.address,
            p = f.protocol,
            port = f.port
        )
    }));
    out
}

/// Marked (Service) traffic and the replies of forwarded connections are forwarded whatever
/// the FORWARD policy says.
fn forward(mark: &str) -> Vec<String> {
    vec![
        format!(
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT"
        ),
        FORWARD_ESTABLISHED.into(),
    ]
}

/// Health-check node ports are let in (written whether or not the set has entries).
fn health_check_accept(sets: &FamilySets) -> String {
    sets.rule(
        "KUBE-NODE-PORT",
        "",
        &sets::HEALTH_CHECK_NODE_PORT,
        "dst",
        "-j ACCEPT",
    )
}

/// New connections to an address on `kube-ipvs0` are refused unless they are for one of its
/// Services' ports: IPVS would otherwise let the node answer on every port of a VIP.
fn ipvs_filter(sets: &FamilySets) -> Vec<String> {
    let mut out: Vec<String> = [
        &sets::LOAD_BALANCER,
        &sets::CLUSTER_IP,
        &sets::EXTERNAL_IP,
        &sets::EXTERNAL_IP_LOCAL,
    ]
    .into_iter()
    .map(|def| {
        format!(
            "-A KUBE-IPVS-FILTER -m set --match-set {} dst,dst -j RETURN",
            sets.name(def)
        )
    })
    .collect();
    out.push(format!(
        "-A KUBE-IPVS-FILTER -m set --match-set {} dst -j RETURN",
        sets.name(&sets::HEALTH_CHECK_NODE_PORT)
    ));
    out.push(format!(
        "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set {} dst -j REJECT",
        sets.name(&sets::IPVS_IPS)
    ));
    out
}

/// Every chain of the agent, the rules of each table, and the jumps into the chains.
fn assemble(nat: Vec<String>, filter: Vec<String>) -> Rules {
    let mut out = Rules::default();
    for table in Table::ALL {
        for c in table.chains() {
            out.chains.insert((table, (*c).into()));
        }
    }
    out.rules.extend(nat.into_iter().map(|r| (Table::Nat, r)));
    out.rules
        .extend(filter.into_iter().map(|r| (Table::Filter, r)));
    out.jumps = JUMPS.to_vec();
    out
}
