//! The rule table, the restore text and the canonical form, each against known lines.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::model::kernel::canonical::canonical;
use crate::model::kernel::sets::{self, SetDef, SetName};
use crate::model::kernel::{Rules, Set, SetEntry, SetKind, Table};
use crate::model::snapshot::cluster::Family;
use crate::model::snapshot::config::{LocalDetector, ProxyConfig};

fn sets_with(names: &[&SetDef]) -> BTreeMap<SetName, Set> {
    names
        .iter()
        .map(|d| {
            let entry = match d.kind {
                SetKind::BitmapPort => SetEntry::Port(30000),
                _ => SetEntry::Ip("10.0.0.1".parse().unwrap()),
            };
            (
                SetName::new(d, Family::V4),
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
    assert!(full.rules.iter().any(|(t, r)| *t == Table::Nat
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
            (Table::Nat, "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000".into()),
            (Table::Nat, "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0".into()),
            (Table::Nat, "-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ".into()),
            (Table::Filter, "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT --reject-with icmp-port-unreachable".into()),
        ],
        jumps: vec![],
    };
    let written = Rules {
        chains: Default::default(),
        rules: vec![
            (Table::Nat, "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000".into()),
            (Table::Nat, "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000".into()),
            (Table::Nat, "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ".into()),
            (Table::Filter, "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT".into()),
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

/// The removal deletes each jump before the chain it leads to, and deletes only the agent's
/// chains, each declared first (flushed) so that `-X` finds it empty.
#[test]
fn removal_input_deletes_jumps_then_the_agents_chains_table_by_table() {
    let r = rules(Family::V4, &ProxyConfig::default(), &BTreeMap::new(), &[]);
    let text = removal_input(&r);
    let (nat, filter) = text.split_once("COMMIT\n").unwrap();
    assert!(
        nat.starts_with("*nat\n") && filter.starts_with("*filter\n"),
        "{text}"
    );
    assert!(filter.ends_with("COMMIT\n"));
    for (table, section) in [(Table::Nat, nat), (Table::Filter, filter)] {
        let lines: Vec<&str> = section.lines().collect();
        let declared = lines.iter().filter(|l| l.starts_with(':')).count();
        let deleted = lines.iter().filter(|l| l.starts_with("-X ")).count();
        let chains = r.chains.iter().filter(|(t, _)| *t == table).count();
        assert_eq!((declared, deleted), (chains, chains), "{section}");
        let jumps = r.jumps.iter().filter(|j| j.table == table).count();
        assert_eq!(lines.iter().filter(|l| l.starts_with("-D ")).count(), jumps);
        let last_jump = lines.iter().rposition(|l| l.starts_with("-D ")).unwrap();
        let first_x = lines.iter().position(|l| l.starts_with("-X ")).unwrap();
        assert!(last_jump < first_x, "{section}");
    }
    assert!(!text.contains("-F "), "no chain is flushed by name: {text}");
}
