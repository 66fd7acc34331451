//! The kernel state one program left in its namespace, as the real tools print it, and the
//! normalisation that removes only what carries no meaning: counters, ipset's random
//! `initval`, and order where the kernel's order is arbitrary (hash order of IPVS services,
//! real servers and set members; the order of chain declarations). The order of rules within
//! a chain carries meaning and is kept.

use std::collections::BTreeMap;

/// One source of state: its name and the normalised lines.
pub type Sections = BTreeMap<&'static str, Vec<String>>;

/// The commands that read a namespace's state, by section name. Each runs with `sh -c`
/// inside the namespace; a tool that finds nothing prints nothing and succeeds, and a tool
/// that fails fails the reading ([`parse`]): an empty section means an empty state, never a
/// missing tool.
pub const READERS: &[(&str, &str)] = &[
    ("ipvs", "ipvsadm -Sn"),
    ("ipvs-timeouts", "ipvsadm -Ln --timeout"),
    ("ipset", "ipset save"),
    ("iptables-legacy", "iptables-legacy-save"),
    ("ip6tables-legacy", "ip6tables-legacy-save"),
    ("iptables-nft", "iptables-nft-save"),
    ("ip6tables-nft", "ip6tables-nft-save"),
    (
        "kube-ipvs0",
        "if [ -e /sys/class/net/kube-ipvs0 ]; then ip -d link show kube-ipvs0 | head -3; \
         ip -o addr show dev kube-ipvs0; fi",
    ),
    ("sysctl", SYSCTLS),
    // Local address and port of every listening TCP socket; only the node-port range is
    // kept (the health-check node ports), the programs' own servers are set by flags.
    ("health-check-listeners", "ss -Hltn"),
];

/// The sysctls either program may set, printed as `name = value` (absent ones skipped).
const SYSCTLS: &str = "for f in net/ipv4/vs/conntrack net/ipv4/vs/conn_reuse_mode \
    net/ipv4/vs/expire_nodest_conn net/ipv4/vs/expire_quiescent_template \
    net/ipv4/conf/all/route_localnet net/ipv4/conf/all/arp_ignore \
    net/ipv4/conf/all/arp_announce net/ipv4/ip_forward net/ipv6/conf/all/forwarding \
    net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables \
    net/netfilter/nf_conntrack_tcp_timeout_established \
    net/netfilter/nf_conntrack_tcp_timeout_close_wait net/netfilter/nf_conntrack_tcp_be_liberal \
    net/netfilter/nf_conntrack_udp_timeout net/netfilter/nf_conntrack_udp_timeout_stream; do \
    if [ -r /proc/sys/$f ]; then echo \"$f = $(cat /proc/sys/$f)\"; fi; done";

/// One shell script running every reader, each output behind a `@@peers-section NAME` line
/// and followed by a `@@peers-status NAME CODE ERROR` line (its exit code and the start of
/// what it wrote to stderr), so that a state is read with one process in the namespace rather
/// than one per tool (process starts are slow under the lab's emulation).
pub fn script() -> String {
    let mut out = String::from("e=$(mktemp)\n");
    for (name, cmd) in READERS {
        out.push_str(&format!(
            "echo '@@peers-section {name}'; {{ {cmd}; }} 2>\"$e\"; \
             echo \"@@peers-status {name} $? $(head -c 300 \"$e\" | tr '\\n' ' ')\"\n"
        ));
    }
    out.push_str("rm -f \"$e\"\n");
    out
}

/// A reader that failed: the state read is not the namespace's.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A tool exited non-zero.
    #[error("{section}: `{command}` failed (exit {code}): {stderr}")]
    Failed {
        /// The section.
        section: &'static str,
        /// Its command.
        command: &'static str,
        /// The exit code.
        code: String,
        /// The start of its stderr.
        stderr: String,
    },
    /// A section's output never came (the script stopped early).
    #[error("{0}: no output at all (the reading script stopped before it)")]
    Missing(&'static str),
}

/// Splits the output of [`script`] and normalises each section; an error names the first
/// reader that failed or never ran.
pub fn parse(output: &str) -> Result<Sections, ReadError> {
    let mut raw: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut status: BTreeMap<&'static str, (String, String)> = BTreeMap::new();
    let mut current: Option<&'static str> = None;
    let reader = |name: &str| READERS.iter().find(|(n, _)| *n == name);
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("@@peers-section ") {
            current = reader(name.trim()).map(|(n, _)| *n);
            if let Some(c) = current {
                raw.entry(c).or_default();
            }
        } else if let Some(rest) = line.strip_prefix("@@peers-status ") {
            let mut words = rest.splitn(3, ' ');
            let name = words.next().unwrap_or_default();
            if let Some((n, _)) = reader(name) {
                let code = words.next().unwrap_or_default().to_string();
                let err = words.next().unwrap_or_default().trim().to_string();
                status.insert(n, (code, err));
            }
            current = None;
        } else if let Some(c) = current {
            let text = raw.entry(c).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    for (name, command) in READERS {
        match status.get(name) {
            None => return Err(ReadError::Missing(name)),
            Some((code, stderr)) if code != "0" => {
                return Err(ReadError::Failed {
                    section: name,
                    command,
                    code: code.clone(),
                    stderr: stderr.clone(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(raw
        .into_iter()
        .map(|(name, text)| (name, normalise(name, &text)))
        .collect())
}

/// Normalises the raw output of the reader named `section`.
pub fn normalise(section: &str, raw: &str) -> Vec<String> {
    match section {
        "ipvs" => ipvs(raw),
        "ipset" => ipset(raw),
        s if s.contains("tables") => iptables(raw),
        "kube-ipvs0" => link(raw),
        "health-check-listeners" => listeners(raw),
        _ => raw
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
    }
}

/// `ipvsadm -Sn`: each virtual server (`-A`) with its real servers (`-a`) sorted, the
/// virtual servers sorted.
fn ipvs(raw: &str) -> Vec<String> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current = String::new();
    for l in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if l.starts_with("-A ") {
            current = l.to_string();
            groups.entry(current.clone()).or_default();
        } else {
            groups
                .entry(current.clone())
                .or_default()
                .push(l.to_string());
        }
    }
    let mut out = Vec::new();
    for (service, mut reals) in groups {
        reals.sort();
        if !service.is_empty() {
            out.push(service);
        }
        out.extend(reals);
    }
    out
}

/// `ipset save`: `initval` dropped; each set's `create` line followed by its members sorted;
/// the sets sorted by name.
fn ipset(raw: &str) -> Vec<String> {
    let mut sets: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for l in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut words = l.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let name = words.next().unwrap_or_default().to_string();
        match verb {
            "create" => {
                let mut kept = Vec::new();
                let mut skip = false;
                for w in l.split_whitespace() {
                    if skip {
                        skip = false;
                    } else if w == "initval" {
                        skip = true;
                    } else {
                        kept.push(w);
                    }
                }
                sets.entry(name).or_default().0 = kept.join(" ");
            }
            _ => sets.entry(name).or_default().1.push(l.to_string()),
        }
    }
    let mut out = Vec::new();
    for (_, (create, mut members)) in sets {
        members.sort();
        out.push(create);
        out.extend(members);
    }
    out
}

/// `iptables-save`: comments and counters dropped; per table, the chain declarations sorted,
/// then each chain's rules in their order, chains sorted by name; tables sorted.
fn iptables(raw: &str) -> Vec<String> {
    type Table = (Vec<String>, BTreeMap<String, Vec<String>>);
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    let mut table = String::new();
    for l in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if l.starts_with('#') || l == "COMMIT" {
            continue;
        }
        if let Some(t) = l.strip_prefix('*') {
            table = t.to_string();
            tables.entry(table.clone()).or_default();
        } else if let Some(chain) = l.strip_prefix(':') {
            // ":KUBE-SERVICES - [0:0]": the packet and byte counters carry no meaning.
            let decl = match chain.rfind(" [") {
                Some(i) => &chain[..i],
                None => chain,
            };
            tables
                .entry(table.clone())
                .or_default()
                .0
                .push(format!(":{decl}"));
        } else {
            let rule = strip_rule_counters(l);
            let chain = rule
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            tables
                .entry(table.clone())
                .or_default()
                .1
                .entry(chain)
                .or_default()
                .push(rule);
        }
    }
    let mut out = Vec::new();
    for (name, (mut decls, rules)) in tables {
        decls.sort();
        out.push(format!("*{name}"));
        out.extend(decls);
        for (_, r) in rules {
            out.extend(r);
        }
    }
    out
}

/// `[12:345] -A CHAIN ...` (iptables-save -c) keeps `-A CHAIN ...`.
fn strip_rule_counters(l: &str) -> String {
    if l.starts_with('[')
        && let Some(i) = l.find("] ")
    {
        return l[i + 2..].to_string();
    }
    l.to_string()
}

/// `ip -d link` and `ip -o addr` of kube-ipvs0: the link's kind and state, and its
/// addresses sorted, without interface indexes, lifetimes or link-local addresses.
fn link(raw: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut addrs = Vec::new();
    for l in raw.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "inet" || *w == "inet6") {
            if let Some(a) = words.get(i + 1)
                && !a.starts_with("fe80:")
            {
                addrs.push(format!("{} {a}", words[i]));
            }
        } else if let Some(i) = words.iter().position(|w| *w == "state") {
            out.push(format!("state {}", words.get(i + 1).unwrap_or(&"")));
        } else if words.first() == Some(&"dummy") {
            out.push("dummy".into());
        }
    }
    addrs.sort();
    out.extend(addrs);
    out
}

/// `ss -Hltn`'s local `address:port` column (the fourth): sockets on node-port range ports
/// (30000 to 32767), sorted. `ss` writes an IPv6-only wildcard as `[::]` and a dual-stack one as `*`,
/// so the two stay apart.
fn listeners(raw: &str) -> Vec<String> {
    let mut out: Vec<String> = raw
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter(|l| {
            l.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_some_and(|p| (30000..=32767).contains(&p))
        })
        .map(String::from)
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script's output for every reader, `sections` filled in, the others empty.
    fn output(sections: &[(&str, &str)], failed: Option<&str>) -> String {
        let mut out = String::new();
        for (name, _) in READERS {
            out.push_str(&format!("@@peers-section {name}\n"));
            if let Some((_, text)) = sections.iter().find(|(n, _)| n == name) {
                out.push_str(text);
            }
            let code = if failed == Some(*name) {
                "127 sh: 1: ipset: not found"
            } else {
                "0 "
            };
            out.push_str(&format!("@@peers-status {name} {code}\n"));
        }
        out
    }

    #[test]
    fn the_script_output_splits_into_its_sections() {
        let s = parse(&output(
            &[
                ("ipvs", "-A -t 10.96.0.2:80 -s rr\n"),
                ("sysctl", "net/ipv4/vs/conntrack = 1\n"),
            ],
            None,
        ))
        .unwrap();
        assert_eq!(s["ipvs"], ["-A -t 10.96.0.2:80 -s rr"]);
        assert_eq!(s["sysctl"], ["net/ipv4/vs/conntrack = 1"]);
        assert!(s["ipset"].is_empty());
        assert_eq!(s.len(), READERS.len());
        assert!(script().contains("@@peers-section kube-ipvs0"));
        assert!(!script().contains("/dev/null"));
    }

    #[test]
    fn a_reader_that_fails_or_never_ran_fails_the_reading() {
        let e = parse(&output(&[], Some("ipset"))).unwrap_err().to_string();
        assert!(
            e.contains("ipset save") && e.contains("127") && e.contains("not found"),
            "{e}"
        );
        let cut = output(&[], None);
        let cut = &cut[..cut.find("@@peers-section sysctl").unwrap()];
        assert!(matches!(parse(cut), Err(ReadError::Missing("sysctl"))));
    }

    #[test]
    fn listeners_keep_node_port_range_sockets_sorted() {
        let raw = "LISTEN 0 4096 0.0.0.0:10256 0.0.0.0:*\n\
                   LISTEN 0 4096 [::]:32054 [::]:*\n\
                   LISTEN 0 4096 192.168.50.10:32054 0.0.0.0:*\n\
                   LISTEN 0 1024 *:31000 *:*\n\
                   LISTEN 0 4096 127.0.0.1:6443 0.0.0.0:*\n";
        assert_eq!(
            listeners(raw),
            ["*:31000", "192.168.50.10:32054", "[::]:32054"]
        );
    }

    #[test]
    fn ipvs_sorts_services_and_real_servers_but_keeps_them_together() {
        let raw = "-A -t 10.96.0.2:80 -s rr\n-a -t 10.96.0.2:80 -r 10.0.0.9:80 -m -w 1\n\
                   -a -t 10.96.0.2:80 -r 10.0.0.1:80 -m -w 1\n-A -t 10.96.0.1:443 -s rr\n";
        assert_eq!(
            ipvs(raw),
            [
                "-A -t 10.96.0.1:443 -s rr",
                "-A -t 10.96.0.2:80 -s rr",
                "-a -t 10.96.0.2:80 -r 10.0.0.1:80 -m -w 1",
                "-a -t 10.96.0.2:80 -r 10.0.0.9:80 -m -w 1",
            ]
        );
    }

    #[test]
    fn ipset_drops_initval_and_sorts_members() {
        let raw = "create B hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1234abcd\n\
                   add B 10.0.0.2\nadd B 10.0.0.1\ncreate A bitmap:port range 0-65535\n";
        assert_eq!(
            ipset(raw),
            [
                "create A bitmap:port range 0-65535",
                "create B hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12",
                "add B 10.0.0.1",
                "add B 10.0.0.2",
            ]
        );
    }

    #[test]
    fn iptables_drops_counters_keeps_rule_order_within_a_chain() {
        let raw = "# Generated by iptables-nft-save v1.8.9\n*nat\n:POSTROUTING ACCEPT [3:180]\n\
                   :KUBE-A - [0:0]\n-A KUBE-A -j RETURN\n-A POSTROUTING -j KUBE-A\n-A KUBE-A -j MARK\nCOMMIT\n";
        assert_eq!(
            iptables(raw),
            [
                "*nat",
                ":KUBE-A -",
                ":POSTROUTING ACCEPT",
                "-A KUBE-A -j RETURN",
                "-A KUBE-A -j MARK",
                "-A POSTROUTING -j KUBE-A",
            ]
        );
    }

    #[test]
    fn link_keeps_kind_state_and_sorted_addresses() {
        let raw = "5: kube-ipvs0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN mode DEFAULT group default\n\
                   link/ether 6a:1e:00:00:00:01 brd ff:ff:ff:ff:ff:ff promiscuity 0\n\
                   dummy addrgenmode eui64\n\
                   5: kube-ipvs0    inet 10.96.0.10/32 scope global kube-ipvs0\\       valid_lft forever\n\
                   5: kube-ipvs0    inet 10.96.0.1/32 scope global kube-ipvs0\\       valid_lft forever\n";
        assert_eq!(
            link(raw),
            [
                "state DOWN",
                "dummy",
                "inet 10.96.0.1/32",
                "inet 10.96.0.10/32"
            ]
        );
    }
}
