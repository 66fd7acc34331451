//! The exposition compared with the one the hand-written renderer gave before the agent moved
//! to `prometheus-client` (`testdata/baseline.txt`), on the same sync of the same fixtures:
//! every family's name, type and help, every series' name and labels, every bucket bound,
//! minus the values.

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use super::super::*;
use crate::dataplane::memory::Memory;
use crate::model::fixtures::{cluster, eps, kubernetes, svc};
use crate::model::snapshot::cluster::Protocol;
use crate::model::snapshot::config::ProxyConfig;
use crate::sync::Syncer;
use crate::web::Request;

/// The baseline, written by the hand-written renderer (see its first lines).
const BASELINE: &str = include_str!("../testdata/baseline.txt");

/// `/metrics` after one full sync of a few Services (TCP, UDP, a Local-policy NodePort with
/// no local endpoint, a slice with a trigger time) on the in-memory dataplane, with the
/// change counters, a queued sync and health answers recorded.
pub(super) async fn scrape_after_a_sync() -> String {
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let (api, api_slice) = kubernetes("node-a");
    let mut web = eps("web", "http", Protocol::Tcp, 8080).ready("10.244.1.5", "other");
    web.0.trigger_time = Some(now - Duration::from_millis(1500));
    let c = cluster(
        vec![
            api,
            svc("web")
                .cluster_ip("10.96.0.10")
                .port("http", Protocol::Tcp, 80),
            svc("dns")
                .cluster_ip("10.96.0.53")
                .port("dns", Protocol::Udp, 53),
            svc("edge")
                .cluster_ip("10.96.0.20")
                .port("http", Protocol::Tcp, 80)
                .node_port(30080)
                .etp_local(),
        ],
        vec![
            api_slice,
            web,
            eps("dns", "dns", Protocol::Udp, 53).ready("10.244.1.6", "other"),
            eps("edge", "http", Protocol::Tcp, 8080).ready("10.244.1.7", "other"),
        ],
    );
    let config = ProxyConfig {
        node_name: "node-a".into(),
        ..ProxyConfig::default()
    };
    let mut syncer = Syncer::new(Memory::default(), config);
    let report = syncer.sync(&c, true).await.expect("a sync on memory");
    let m = Metrics::new(&[Family::V4, Family::V6], false);
    m.changes_seen(4, 4);
    m.queued(now);
    m.record(&report, now);
    m.healthz_response(200);
    m.livez_response(200);
    m.set_blocked(false);
    let request = Request {
        method: "GET".into(),
        path: "/metrics".into(),
    };
    handle(&m, "{}", &request).body
}

/// Labels `kubernetes_build_info` gained with `prometheus-client` (the commit it was built
/// from and that commit's date); every other label is as it was.
const ADDED_BUILD_LABELS: [&str; 2] = ["build_date", "git_commit"];

/// Families added since the baseline was written; each must be in the exposition.
const ADDED_FAMILIES: [&str; 1] = ["kube_proxy_ipvs_heap_inuse_bytes"];

/// One family or series of an exposition, values left out: `family NAME TYPE HELP` and
/// `series NAME{LABELS}` with labels sorted and `le` read as a number (`1` and `1.0` are one
/// bound). A help text's one trailing period is dropped: `prometheus-client`'s registry ends
/// every help with one, kube-proxy's have none.
fn normalize(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut help = std::collections::BTreeMap::new();
    for line in text.lines() {
        if line.is_empty() || line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help.insert(name.to_string(), text.to_string());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            let help = help.get(name).cloned().unwrap_or_default();
            let help = help.strip_suffix('.').unwrap_or(&help);
            out.insert(format!("family {name} {kind} {help}"));
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, _value) = line.rsplit_once(' ').expect("series value");
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut labels: Vec<String> = split_labels(labels)
            .into_iter()
            .filter(|(k, _)| {
                name != "kubernetes_build_info" || !ADDED_BUILD_LABELS.contains(&k.as_str())
            })
            .map(|(k, v)| {
                let v = if k == "le" && v != "+Inf" {
                    v.parse::<f64>().expect("le is a number").to_string()
                } else {
                    v
                };
                format!("{k}={v:?}")
            })
            .collect();
        labels.sort();
        out.insert(format!("series {name}{{{}}}", labels.join(",")));
    }
    out
}

/// `k="v",k2="v2"` into pairs, the values unescaped.
fn split_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').to_string(), value));
        rest = &after[end..];
    }
    out
}

#[tokio::test]
async fn the_exposition_keeps_every_family_series_label_and_bucket_of_the_baseline() {
    let before = normalize(BASELINE);
    // Enough to be the whole exposition: 23 families, 2 x 3 histograms of 16 to 81 buckets.
    assert!(before.len() > 300, "{}", before.len());
    let text = scrape_after_a_sync().await;
    let after = normalize(&text);
    let lost: Vec<_> = before.difference(&after).collect();
    let added = |line: &str| {
        ADDED_FAMILIES
            .iter()
            .any(|f| line.split(['{', ' ']).nth(1) == Some(*f))
    };
    for family in ADDED_FAMILIES {
        assert!(
            after
                .iter()
                .any(|l| l.starts_with("series ") && added(l) && l.contains(family)),
            "{family} is not exposed:\n{text}"
        );
    }
    let gained: Vec<_> = after.difference(&before).filter(|l| !added(l)).collect();
    assert!(
        lost.is_empty() && gained.is_empty(),
        "lost {lost:#?}\ngained {gained:#?}\n{text}"
    );
    let build = text
        .lines()
        .find(|l| l.starts_with("kubernetes_build_info{"))
        .expect("kubernetes_build_info");
    for label in ADDED_BUILD_LABELS {
        assert!(build.contains(&format!("{label}=\"")), "{build}");
    }
}

#[test]
fn a_renamed_family_or_a_moved_bucket_is_seen() {
    let before = normalize(BASELINE);
    for (from, to) in [
        // What registering a counter under its exposed name would give.
        (
            "kube_proxy_ipvs_syncs_total",
            "kube_proxy_ipvs_syncs_total_total",
        ),
        ("le=\"0.004\"", "le=\"0.005\""),
        ("traffic_policy=", "policy="),
        (
            "# TYPE kube_proxy_ipvs_blocked gauge",
            "# TYPE kube_proxy_ipvs_blocked counter",
        ),
    ] {
        assert_ne!(normalize(&BASELINE.replace(from, to)), before, "{from}");
    }
}

#[test]
fn labels_are_split_and_unescaped() {
    assert_eq!(
        split_labels(r#"a="x",b="q\"r\\s\nt",le="0.5""#),
        vec![
            ("a".to_string(), "x".to_string()),
            ("b".to_string(), "q\"r\\s\nt".to_string()),
            ("le".to_string(), "0.5".to_string()),
        ]
    );
}
