//! The recorder's and the exposition's tests; `baseline` compares the exposition with the one
//! the hand-written renderer gave.

mod baseline;

use super::*;
use crate::model::kernel::sets::named;
use crate::model::plan::Plan;

fn lines_of<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .collect()
}

/// Every sample line is `name{labels} value` with a declared name and a number.
fn assert_well_formed(text: &str) {
    let mut declared = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                declared
                    .insert(name.to_string(), kind.to_string())
                    .is_none(),
                "{name} twice"
            );
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "{line}");
        let name = series.split('{').next().unwrap();
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "{line}"
        );
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|b| declared.get(*b).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(declared.contains_key(base), "{name} has no TYPE");
        if let Some(labels) = series.strip_prefix(name)
            && !labels.is_empty()
        {
            assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
        }
    }
}

#[test]
fn kube_proxy_names_and_types() {
    let m = Metrics::new(&[Family::V4, Family::V6], false);
    // A family without a series is left out, as client_golang leaves out an empty
    // vector: no answer yet, no `kubeproxy_proxy_healthz_total`.
    assert!(!m.render().contains("kubeproxy_proxy_healthz_total"));
    m.healthz_response(200);
    m.livez_response(200);
    let obs = SyncObservation {
        ops: [(OpKind::AddService, 1)].into(),
        ..SyncObservation::default()
    };
    m.observe_sync(&obs, true);
    m.ipset_entries([("KUBE-CLUSTER-IP".to_string(), 0)]);
    let text = m.render();
    assert_well_formed(&text);
    for (name, kind) in [
        ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
        (
            "kubeproxy_network_programming_duration_seconds",
            "histogram",
        ),
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
        (
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "gauge",
        ),
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "gauge",
        ),
        (
            "kubeproxy_sync_proxy_rules_endpoint_changes_total",
            "counter",
        ),
        (
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "gauge",
        ),
        (
            "kubeproxy_sync_proxy_rules_service_changes_total",
            "counter",
        ),
        (
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "gauge",
        ),
        (
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
            "counter",
        ),
        ("kubeproxy_proxy_healthz_total", "counter"),
        ("kubeproxy_proxy_livez_total", "counter"),
        (
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "histogram",
        ),
        (
            "kubeproxy_conntrack_reconciler_deleted_entries_total",
            "counter",
        ),
        ("kube_proxy_ipvs_operations_total", "counter"),
        ("kube_proxy_ipvs_drift_repaired_total", "counter"),
        ("kube_proxy_ipvs_destinations_draining", "gauge"),
        ("kube_proxy_ipvs_ipset_entries", "gauge"),
        ("kube_proxy_ipvs_blocked", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind}"
        );
    }
    // Per-family series exist from the start, at zero.
    assert!(text.contains(
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 0\n"
    ));
    assert!(text.contains(
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 0\n"
    ));
    assert_eq!(
        lines_of(&text, "kubeproxy_sync_proxy_rules_duration_seconds_bucket").len(),
        2 * 16
    );
    assert_eq!(
        lines_of(
            &text,
            "kubeproxy_network_programming_duration_seconds_bucket"
        )
        .len(),
        2 * (network_programming_buckets().len() + 1)
    );
}

#[test]
fn buckets_are_kube_proxys() {
    let b = sync_buckets();
    assert_eq!((b.len(), b[0], b[14]), (15, 0.001, 16.384));
    let b = network_programming_buckets();
    assert_eq!(b.len(), 2 + 59 + 12 + 7);
    assert_eq!(
        (b[0], b[1], b[2], b[60], b[61], b[72], b[73], b[79]),
        (0.25, 0.5, 1.0, 59.0, 60.0, 115.0, 120.0, 300.0)
    );
    assert!(b.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_sync_is_recorded() {
    let m = Metrics::new(&[Family::V4], false);
    let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let plan = Plan {
        ops: vec![
            Op::CreateLink,
            Op::AddAddress("10.96.0.1".parse().unwrap()),
            Op::AddAddress("10.96.0.2".parse().unwrap()),
            Op::DelAddress("10.96.0.3".parse().unwrap()),
        ],
        warnings: Vec::new(),
    };
    let applied = Applied {
        done: 3,
        failed: vec![(3, ipvs_netlink::Error::from_errno(16).into())],
        messages: 4,
    };
    let obs = SyncObservation::from_plan(&plan, &applied, Duration::from_millis(3), at);
    assert_eq!(obs.ops.get(&OpKind::AddAddress), Some(&2));
    assert_eq!(obs.failed.get(&OpKind::DelAddress), Some(&1));
    m.observe_sync(&obs, true);
    m.queued(at);
    m.healthz_response(200);
    m.healthz_response(503);
    m.healthz_response(200);
    m.ipset_entries([("KUBE-CLUSTER-IP".to_string(), 7)]);
    let text = m.render();
    assert_well_formed(&text);
    for line in [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.002\"} 0",
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.004\"} 1",
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"+Inf\"} 1",
        "kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family=\"IPv4\"} 0.003",
        "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1",
        // A failed sync leaves the last-success timestamp alone.
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 0.0",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 1700000000.0",
        "kube_proxy_ipvs_operations_total{kind=\"add_address\"} 2",
        "kube_proxy_ipvs_operations_total{kind=\"create_link\"} 1",
        "kube_proxy_ipvs_operation_failures_total{kind=\"del_address\"} 1",
        "kube_proxy_ipvs_syncs_total{type=\"full\"} 1",
        "kubeproxy_proxy_healthz_total{code=\"200\"} 2",
        "kubeproxy_proxy_healthz_total{code=\"503\"} 1",
        "kube_proxy_ipvs_ipset_entries{set=\"KUBE-CLUSTER-IP\"} 7",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    let ok = SyncObservation::from_plan(&Plan::default(), &Applied::default(), Duration::ZERO, at);
    m.observe_sync(&ok, false);
    assert!(m.render().contains(
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1700000000.0\n"
    ));
}

#[test]
fn restore_failures_count_per_family() {
    let m = Metrics::new(&[Family::V4, Family::V6], false);
    let write = Op::WriteRules {
        family: Family::V6,
        rules: Default::default(),
        missing_jumps: Vec::new(),
    };
    let plan = Plan {
        ops: vec![write.clone()],
        warnings: Vec::new(),
    };
    let applied = Applied {
        done: 0,
        failed: vec![(
            0,
            crate::dataplane::Error::Tool {
                program: "ip6tables-restore".into(),
                message: "exit 1".into(),
            },
        )],
        messages: 0,
    };
    m.observe_sync(
        &SyncObservation::from_plan(&plan, &applied, Duration::ZERO, UNIX_EPOCH),
        true,
    );
    let text = m.render();
    assert!(text.contains(
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 1\n"
    ));
    assert!(text.contains(
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"} 0\n"
    ));
}

#[test]
fn drift_is_counted_by_kind() {
    let m = Metrics::new(&[Family::V4], false);
    let text = m.render();
    for kind in DriftKind::ALL {
        let line = format!("kube_proxy_ipvs_drift_repaired_total{{kind=\"{kind}\"}} 0");
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    let sync = |drift: &[(DriftKind, u64)]| SyncObservation {
        drift_repaired: drift.iter().copied().collect(),
        ..SyncObservation::default()
    };
    m.observe_sync(
        &sync(&[(DriftKind::VirtualServer, 1), (DriftKind::RealServer, 2)]),
        true,
    );
    m.observe_sync(
        &sync(&[(DriftKind::RealServer, 1), (DriftKind::Jump, 1)]),
        true,
    );
    m.observe_sync(&sync(&[]), true);
    let text = m.render();
    assert_well_formed(&text);
    let series = lines_of(&text, "kube_proxy_ipvs_drift_repaired_total");
    assert_eq!(series.len(), DriftKind::ALL.len(), "{series:?}");
    for line in [
        "kube_proxy_ipvs_drift_repaired_total{kind=\"virtual_server\"} 1",
        "kube_proxy_ipvs_drift_repaired_total{kind=\"real_server\"} 3",
        "kube_proxy_ipvs_drift_repaired_total{kind=\"jump\"} 1",
        "kube_proxy_ipvs_drift_repaired_total{kind=\"set_entry\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
}

#[test]
fn label_values_are_escaped() {
    let m = Metrics::new(&[Family::V4], false);
    m.ipset_entries([("a\"b\\c\nd".to_string(), 1)]);
    let text = m.render();
    assert!(
        text.lines()
            .any(|l| l == "kube_proxy_ipvs_ipset_entries{set=\"a\\\"b\\\\c\\nd\"} 1"),
        "{text}"
    );
}

#[test]
fn a_report_is_recorded_whole_and_ends_the_pending_changes() {
    let m = Metrics::new(&[Family::V4], false);
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
    m.changes_seen(2, 3);
    m.changes_seen(0, 1);
    let text = m.render();
    for line in [
        "kubeproxy_sync_proxy_rules_service_changes_pending 2",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending 4",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total 4",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    let mut report = Report {
        full: true,
        duration: Duration::from_millis(3),
        draining: 2,
        ipvs_connections: Some(5),
        set_sizes: vec![(named("KUBE-CLUSTER-IP"), 9)],
        programmed: vec![(Family::V4, now - Duration::from_secs(1))],
        ..Report::default()
    };
    report.no_local_endpoints.insert(Family::V4, (1, 2));
    report.drift.counts.insert(DriftKind::VirtualServer, 1);
    report.conntrack.push(crate::dataplane::conntrack::Cleaned {
        family: Family::V4,
        scanned: 10,
        undecoded: 0,
        deleted: 4,
        vanished: 0,
        duration: Duration::from_millis(1),
    });
    m.record(&report, now);
    m.set_blocked(true);
    let text = m.render();
    assert_well_formed(&text);
    for line in [
        "kubeproxy_sync_proxy_rules_service_changes_pending 0",
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending 0",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total 4",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1700000100.0",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 2",
        "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 1",
        "kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family=\"IPv4\"} 4",
        "kube_proxy_ipvs_syncs_total{type=\"full\"} 1",
        "kube_proxy_ipvs_drift_repaired_total{kind=\"virtual_server\"} 1",
        "kube_proxy_ipvs_destinations_draining 2",
        "kube_proxy_ipvs_connections 5",
        "kube_proxy_ipvs_ipset_entries{set=\"KUBE-CLUSTER-IP\"} 9",
        "kube_proxy_ipvs_blocked 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    m.set_blocked(false);
    assert!(m.render().lines().any(|l| l == "kube_proxy_ipvs_blocked 0"));
}

fn served(name: &str, key: &str, n: u64) -> crate::sync::ServiceTraffic {
    let (address, port) = key.rsplit_once(':').unwrap();
    crate::sync::ServiceTraffic {
        service: crate::model::snapshot::cluster::ServiceRef::new("shop", name),
        port_name: "http".into(),
        key: crate::model::kernel::VsKey {
            address: address.trim_matches(['[', ']']).parse().unwrap(),
            protocol: crate::model::snapshot::cluster::Protocol::Tcp,
            port: port.parse().unwrap(),
        },
        traffic: crate::dataplane::Traffic {
            connections: n,
            in_packets: 10 * n,
            out_packets: 20 * n,
            in_bytes: 1000 * n,
            out_bytes: 2000 * n,
        },
    }
}

#[test]
fn per_virtual_server_counters_are_exported_only_when_asked() {
    let off = Metrics::new(&[Family::V4], false);
    off.service_traffic(vec![served("web", "10.96.0.10:80", 1)]);
    assert!(!off.render().contains("kube_proxy_ipvs_service_"));

    let m = Metrics::new(&[Family::V4], true);
    m.service_traffic(vec![
        served("web", "10.96.0.10:80", 3),
        served("web", "[fd00::10]:80", 1),
    ]);
    let text = m.render();
    assert_well_formed(&text);
    for line in [
        "# TYPE kube_proxy_ipvs_service_connections_total counter",
        "kube_proxy_ipvs_service_connections_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 3",
        "kube_proxy_ipvs_service_in_packets_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 30",
        "kube_proxy_ipvs_service_out_packets_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 60",
        "kube_proxy_ipvs_service_in_bytes_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 3000",
        "kube_proxy_ipvs_service_out_bytes_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"[fd00::10]:80\"} 2000",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    // The next full sync's snapshot replaces the last: a virtual server gone is gone.
    m.service_traffic(vec![served("web", "10.96.0.10:80", 4)]);
    let text = m.render();
    assert!(!text.contains("fd00::10"), "{text}");
    assert_eq!(
        lines_of(&text, "kube_proxy_ipvs_service_connections_total"),
        [
            "kube_proxy_ipvs_service_connections_total{namespace=\"shop\",service=\"web\",port_name=\"http\",protocol=\"TCP\",address=\"10.96.0.10:80\"} 4"
        ]
    );
}

#[test]
fn the_build_is_named_by_version_and_commit() {
    let text = Metrics::new(&[Family::V4], false).render();
    let line = lines_of(&text, "kubernetes_build_info");
    assert_eq!(line.len(), 1, "{text}");
    let commit = env!("KUBE_PROXY_IPVS_GIT_COMMIT");
    // A 40-digit commit in a git checkout, "unknown" outside one.
    assert!(
        commit == "unknown"
            || (commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit}"
    );
    for label in [
        format!("git_commit=\"{commit}\""),
        format!("git_version=\"v{}\"", env!("CARGO_PKG_VERSION")),
        "compiler=\"rustc\"".to_string(),
        "build_date=\"".to_string(),
    ] {
        assert!(line[0].contains(&label), "{label} in {}", line[0]);
    }
    assert!(line[0].ends_with("} 1"), "{}", line[0]);
}

#[test]
fn configz_is_kube_proxys_one_group_with_the_effective_configuration() {
    let flags = crate::config_file::FlagOverrides::new()
        .with("ipvs-scheduler", "wrr")
        .with("ipvs-service-metrics", "true");
    let loaded =
        crate::config_file::load(None, &flags, crate::config_file::Decoding::Lenient).unwrap();
    let text = configz(&loaded.config).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let groups = v.as_object().unwrap();
    assert_eq!(groups.len(), 1, "{text}");
    let c = &groups["kubeproxy.config.k8s.io"];
    assert_eq!(c["kind"], "KubeProxyConfiguration", "{text}");
    assert_eq!(c["ipvs"]["scheduler"], "wrr", "{text}");
    assert_eq!(c["ipvs"]["serviceMetrics"], true, "{text}");
    assert_eq!(c["metricsBindAddress"], "127.0.0.1:10249", "{text}");
    assert_eq!(c["ipvs"]["syncPeriod"], "30s", "{text}");
}

#[test]
fn routes() {
    let m = Metrics::new(&[Family::V4], false);
    let get = |path: &str| {
        handle(
            &m,
            "{\"kubeproxy.config.k8s.io\":{}}",
            &Request {
                method: "GET".into(),
                path: path.into(),
            },
        )
    };
    let r = get("/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains("# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram")
    );
    assert_eq!(
        r.headers,
        [(
            "Content-Type",
            "text/plain; version=0.0.4; charset=utf-8".to_string()
        )]
    );
    let c = get("/configz");
    assert_eq!(
        (c.status, c.body.as_str()),
        (200, "{\"kubeproxy.config.k8s.io\":{}}")
    );
    assert_eq!(c.headers[0].1, "application/json");
    assert_eq!(get("/proxyMode").body, "ipvs");
    assert_eq!(get("/healthz").body, "ok");
    assert_eq!(get("/debug/pprof/").status, 404);
}
