use std::collections::BTreeSet;
use std::time::Duration;

use ipnet::IpNet;

use super::*;
use crate::model::snapshot::cluster::Family;
use crate::model::snapshot::config::LocalDetector;

const HEAD: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/// Decodes `body` after the header, defaults, validates and classifies, with no flags.
fn load_text(body: &str) -> Result<Loaded, Error> {
    load_text_with(body, &FlagOverrides::new())
}

fn load_text_with(body: &str, flags: &FlagOverrides) -> Result<Loaded, Error> {
    let dir = std::env::temp_dir().join(format!(
        "kpi-config-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(&path, format!("{HEAD}{body}")).unwrap();
    load(Some(&path), flags, Decoding::Lenient)
}

/// The fields an error names: each invalid one, each unknown one, or the one that did not
/// decode.
fn fields_of(err: &Error) -> Vec<&str> {
    match err {
        Error::Invalid(e) => e.0.iter().map(|f| f.field.as_str()).collect(),
        Error::UnknownFields(fields) => fields.iter().map(String::as_str).collect(),
        Error::Decode { field, .. } | Error::Type { field, .. } => vec![field.as_str()],
        _ => Vec::new(),
    }
}

/// The fields named by the error of loading `body`.
fn error_fields(body: &str) -> Vec<String> {
    let err = load_text(body).map(|l| l.config).unwrap_err();
    fields_of(&err).into_iter().map(str::to_string).collect()
}

#[test]
fn defaults_are_kube_proxys() {
    let c = load_text("mode: ipvs\n").unwrap().config;
    assert_eq!(c.bind_address, "0.0.0.0");
    assert_eq!(c.healthz_bind_address, "0.0.0.0:10256");
    assert_eq!(c.metrics_bind_address, "127.0.0.1:10249");
    assert_eq!(c.oom_score_adj, Some(-999));
    assert_eq!(c.ipvs.sync_period, GoDuration::from_secs(30));
    assert_eq!(c.ipvs.min_sync_period, GoDuration::ZERO);
    assert_eq!(c.ipvs.scheduler, "rr");
    assert_eq!(c.iptables.sync_period, GoDuration::from_secs(30));
    assert_eq!(c.iptables.min_sync_period, GoDuration::from_secs(1));
    assert_eq!(c.iptables.masquerade_bit, Some(14));
    assert_eq!(c.iptables.localhost_node_ports, Some(true));
    assert_eq!(c.conntrack.max_per_core, Some(32768));
    assert_eq!(c.conntrack.min, Some(131072));
    assert_eq!(
        c.conntrack.tcp_established_timeout,
        Some(GoDuration::from_secs(86400))
    );
    assert_eq!(
        c.conntrack.tcp_close_wait_timeout,
        Some(GoDuration::from_secs(3600))
    );
    assert_eq!(c.config_sync_period, GoDuration::from_secs(900));
    assert_eq!(
        c.client_connection.content_type,
        "application/vnd.kubernetes.protobuf"
    );
    assert_eq!(c.client_connection.qps, 5.0);
    assert_eq!(c.client_connection.burst, 10);
    assert_eq!(c.detect_local_mode, "ClusterCIDR");
    assert_eq!(c.logging.format, "text");
    assert_eq!(c.logging.flush_frequency.0, GoDuration::from_secs(5));
    assert_eq!(c.health_timeout(), Duration::from_secs(60));
    assert_eq!(c.healthz_address(), Some("0.0.0.0:10256".parse().unwrap()));
    assert_eq!(
        c.metrics_address(),
        Some("127.0.0.1:10249".parse().unwrap())
    );
    assert_eq!(c, KubeProxyConfiguration::defaults());
}

#[test]
fn ipv6_bind_address_moves_the_default_listeners() {
    let c = load_text("bindAddress: \"::\"\n").unwrap().config;
    assert_eq!(c.healthz_bind_address, "[::]:10256");
    assert_eq!(c.metrics_bind_address, "[::1]:10249");
}

#[test]
fn bare_bind_addresses_get_the_default_port() {
    let c = load_text("healthzBindAddress: 10.0.0.1\nmetricsBindAddress: \"::\"\n")
        .unwrap()
        .config;
    assert_eq!(c.healthz_bind_address, "10.0.0.1:10256");
    assert_eq!(c.metrics_bind_address, "[::]:10249");
}

#[test]
fn a_kubeadm_config_is_read_whole() {
    // What kubeadm writes into the kube-proxy ConfigMap, nulls included.
    let body = "bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: \"\"
  burst: 0
  contentType: \"\"
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: \"\"
  interfaceNamePrefix: \"\"
detectLocalMode: \"\"
enableProfiling: false
healthzBindAddress: \"\"
hostnameOverride: \"\"
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: \"\"
  strictARP: true
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: \"0\"
    text:
      infoBufferSize: \"0\"
  verbosity: 0
metricsBindAddress: \"\"
mode: ipvs
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: \"\"
showHiddenMetricsForVersion: \"\"
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: \"\"
  rootHnsEndpointName: \"\"
  sourceVip: \"\"
";
    let loaded = load_text(body).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let c = loaded.config;
    assert_eq!(
        c.client_connection.kubeconfig,
        "/var/lib/kube-proxy/kubeconfig.conf"
    );
    assert!(c.ipvs.strict_arp);
    let p = c.to_proxy_config("node-a").unwrap();
    assert_eq!(p.families, vec![Family::V4, Family::V6]);
    assert!(matches!(p.local_detector, LocalDetector::ClusterCidr(ref c) if c.len() == 2));
    assert!(p.strict_arp);
    assert_eq!(p.scheduler, "rr");
}

#[test]
fn json_is_read_too() {
    let text = r#"{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration",
        "mode":"ipvs","ipvs":{"scheduler":"sh","syncPeriod":"1m0s"}}"#;
    let (c, warnings) = KubeProxyConfiguration::from_text(text, Decoding::Strict).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(c.ipvs.scheduler, "sh");
    assert_eq!(c.ipvs.sync_period, GoDuration::from_secs(60));
}

#[test]
fn every_validation_error_names_its_field() {
    use Problem as P;
    let secs = GoDuration::from_secs;
    let neg = |d| P::Negative {
        got: Some(Number::Duration(d)),
    };
    let neg_int = |n| P::Negative {
        got: Some(Number::Int(n)),
    };
    let range = |got, min, max| P::OutOfRange {
        got: Some(got),
        min,
        max,
    };
    let s = |v: &str| v.to_string();
    // (body, field path, the problem)
    let cases: Vec<(&str, &str, Problem)> = vec![
        (
            "ipvs:\n  syncPeriod: -1s\n",
            "ipvs.syncPeriod",
            P::NotPositive { got: secs(-1) },
        ),
        (
            "ipvs:\n  minSyncPeriod: -1s\n",
            "ipvs.minSyncPeriod",
            neg(secs(-1)),
        ),
        (
            "ipvs:\n  syncPeriod: 10s\n  minSyncPeriod: 1m\n",
            "ipvs.minSyncPeriod",
            P::AboveLimit {
                got: secs(60),
                limit_field: s("ipvs.syncPeriod"),
                limit: secs(10),
            },
        ),
        (
            "ipvs:\n  tcpTimeout: -1s\n",
            "ipvs.tcpTimeout",
            neg(secs(-1)),
        ),
        (
            "ipvs:\n  tcpFinTimeout: -1s\n",
            "ipvs.tcpFinTimeout",
            neg(secs(-1)),
        ),
        (
            "ipvs:\n  udpTimeout: -1s\n",
            "ipvs.udpTimeout",
            neg(secs(-1)),
        ),
        (
            "ipvs:\n  excludeCIDRs: [10.0.0.0/8, 10.1.2.3]\n",
            "ipvs.excludeCIDRs[1]",
            P::NotACidr {
                value: s("10.1.2.3"),
            },
        ),
        (
            "ipvs:\n  allowedSchedulers: [rr]\n",
            "ipvs.allowedSchedulers[0]",
            P::NotLoadedUnderLock { scheduler: s("rr") },
        ),
        (
            "ipvs:\n  scheduler: \"r r\"\n",
            "ipvs.scheduler",
            P::NotASchedulerName { name: s("r r") },
        ),
        (
            "iptables:\n  masqueradeBit: 32\n",
            "iptables.masqueradeBit",
            range(32, 0, 31),
        ),
        (
            "iptables:\n  masqueradeBit: -1\n",
            "iptables.masqueradeBit",
            range(-1, 0, 31),
        ),
        (
            "iptables:\n  syncPeriod: -1s\n",
            "iptables.syncPeriod",
            P::NotPositive { got: secs(-1) },
        ),
        (
            "iptables:\n  minSyncPeriod: -1s\n",
            "iptables.minSyncPeriod",
            neg(secs(-1)),
        ),
        (
            "iptables:\n  syncPeriod: 500ms\n",
            "iptables.minSyncPeriod",
            P::AboveLimit {
                got: secs(1),
                limit_field: s("iptables.syncPeriod"),
                limit: GoDuration::from_nanos(500_000_000),
            },
        ),
        (
            "conntrack:\n  maxPerCore: -1\n",
            "conntrack.maxPerCore",
            neg_int(-1),
        ),
        ("conntrack:\n  min: -1\n", "conntrack.min", neg_int(-1)),
        (
            "conntrack:\n  tcpEstablishedTimeout: -1s\n",
            "conntrack.tcpEstablishedTimeout",
            neg(secs(-1)),
        ),
        (
            "conntrack:\n  tcpCloseWaitTimeout: -1s\n",
            "conntrack.tcpCloseWaitTimeout",
            neg(secs(-1)),
        ),
        (
            "conntrack:\n  udpTimeout: -1s\n",
            "conntrack.udpTimeout",
            neg(secs(-1)),
        ),
        (
            "conntrack:\n  udpStreamTimeout: -1s\n",
            "conntrack.udpStreamTimeout",
            neg(secs(-1)),
        ),
        (
            "mode: userspace\n",
            "mode",
            P::UnknownMode {
                mode: s("userspace"),
            },
        ),
        (
            "clientConnection:\n  burst: -1\n",
            "clientConnection.burst",
            neg_int(-1),
        ),
        (
            "oomScoreAdj: 1001\n",
            "oomScoreAdj",
            range(1001, -1000, 1000),
        ),
        (
            "oomScoreAdj: -1001\n",
            "oomScoreAdj",
            range(-1001, -1000, 1000),
        ),
        (
            "configSyncPeriod: -1s\n",
            "configSyncPeriod",
            P::NotPositive { got: secs(-1) },
        ),
        (
            "bindAddress: node-a\n",
            "bindAddress",
            P::NotAnIp { value: s("node-a") },
        ),
        (
            "healthzBindAddress: \"0.0.0.0:http\"\n",
            "healthzBindAddress",
            P::NotHostPort {
                value: s("0.0.0.0:http"),
            },
        ),
        (
            "healthzBindAddress: \"0.0.0.0:0\"\n",
            "healthzBindAddress",
            P::PortZero {
                value: s("0.0.0.0:0"),
            },
        ),
        (
            "metricsBindAddress: localhost:10249\n",
            "metricsBindAddress",
            P::NotHostPort {
                value: s("localhost:10249"),
            },
        ),
        (
            "clusterCIDR: 10.0.0.0/8,10.1.0.0/16\n",
            "clusterCIDR",
            P::NotDualStack {
                value: s("10.0.0.0/8,10.1.0.0/16"),
            },
        ),
        (
            "clusterCIDR: 10.0.0.0/8,fd00::/48,10.1.0.0/16\n",
            "clusterCIDR",
            P::TooManyCidrs {
                value: s("10.0.0.0/8,fd00::/48,10.1.0.0/16"),
            },
        ),
        (
            "clusterCIDR: 10.0.0.0\n",
            "clusterCIDR",
            P::NotACidr {
                value: s("10.0.0.0"),
            },
        ),
        (
            "portRange: 2000-300\n",
            "portRange",
            P::NotAPortRange {
                value: s("2000-300"),
            },
        ),
        (
            "portRange: lots\n",
            "portRange",
            P::NotAPortRange { value: s("lots") },
        ),
        (
            "nodePortAddresses: [10.0.0.1]\n",
            "nodePortAddresses[0]",
            P::NotANodePortAddress {
                value: s("10.0.0.1"),
            },
        ),
        (
            "nodePortAddresses: [primary, 10.0.0.0/8]\n",
            "nodePortAddresses[0]",
            P::PrimaryNotAlone,
        ),
        (
            "showHiddenMetricsForVersion: latest\n",
            "showHiddenMetricsForVersion",
            P::NotAVersion { value: s("latest") },
        ),
        (
            "detectLocalMode: PodCIDR\n",
            "detectLocalMode",
            P::UnknownDetectLocalMode { mode: s("PodCIDR") },
        ),
        (
            "detectLocalMode: BridgeInterface\n",
            "detectLocal.bridgeInterface",
            P::EmptyForMode {
                mode: "BridgeInterface",
            },
        ),
        (
            "detectLocalMode: InterfaceNamePrefix\n",
            "detectLocal.interfaceNamePrefix",
            P::EmptyForMode {
                mode: "InterfaceNamePrefix",
            },
        ),
        (
            "hostnameOverride: \"  \"\n",
            "hostnameOverride",
            P::OnlyWhiteSpace,
        ),
        (
            "logging:\n  format: xml\n",
            "logging.format",
            P::UnknownLogFormat { format: s("xml") },
        ),
        (
            "logging:\n  flushFrequency: -1s\n",
            "logging.flushFrequency",
            P::Negative { got: None },
        ),
        (
            "logging:\n  vmodule: [{filePattern: \"\", verbosity: 2}]\n",
            "logging.vmodule[0].filePattern",
            P::BadFilePattern { pattern: s("") },
        ),
    ];
    for (body, field, problem) in cases {
        let err = load_text(body).map(|l| l.config).unwrap_err();
        let hit = err.field_errors().iter().find(|e| e.field == field);
        assert_eq!(
            hit.map(|e| &e.message),
            Some(&problem),
            "{body:?}: expected {field}, got: {err}"
        );
    }
}

#[test]
fn hostile_interface_names_are_refused_naming_their_field() {
    use interface::NameError;
    type Is = fn(&NameError) -> bool;
    let hostile: [(&str, Is); 6] = [
        ("\"cbr0 -j ACCEPT\"", |e| {
            matches!(e, NameError::Char { c: ' ', .. })
        }),
        ("\"cbr0\\n-A KUBE-FORWARD -j ACCEPT\"", |e| {
            matches!(e, NameError::Char { c: '\n', .. })
        }),
        (
            "\"a-name-of-16-byt\"",
            |e| matches!(e, NameError::TooLong { name, .. } if name.len() == 16),
        ),
        ("\"..\"", |e| matches!(e, NameError::Dots { .. })),
        ("\"veth+\"", |e| matches!(e, NameError::Char { c: '+', .. })),
        ("\"eth0:1\"", |e| {
            matches!(e, NameError::Char { c: ':', .. })
        }),
    ];
    for (mode, field, key) in [
        (
            "BridgeInterface",
            "detectLocal.bridgeInterface",
            "bridgeInterface",
        ),
        (
            "InterfaceNamePrefix",
            "detectLocal.interfaceNamePrefix",
            "interfaceNamePrefix",
        ),
    ] {
        for (value, is) in hostile {
            let body = format!("detectLocalMode: {mode}\ndetectLocal:\n  {key}: {value}\n");
            let err = load_text(&body).unwrap_err();
            let hit = err.field_errors().iter().find(|e| e.field == field);
            assert!(
                hit.is_some_and(|e| matches!(&e.message, Problem::Interface(n) if is(n))),
                "{body:?}: expected {field}, got: {err:?}"
            );
            // Checked in any mode: a name that is set is refused even before it is used.
            let body = format!("detectLocal:\n  {key}: {value}\n");
            assert!(load_text(&body).is_err(), "{body:?}");
        }
    }
    // The same names through the flags, which set the same fields.
    for (flag, field) in [
        ("pod-bridge-interface", "detectLocal.bridgeInterface"),
        (
            "pod-interface-name-prefix",
            "detectLocal.interfaceNamePrefix",
        ),
    ] {
        let err = load(
            None,
            &FlagOverrides::new().with(flag, "cni0\n-j ACCEPT"),
            Decoding::Strict,
        )
        .unwrap_err();
        assert_eq!(fields_of(&err), [field], "{err}");
    }
    // A prefix leaves room for iptables' `+`: 15 bytes make a name, not a prefix.
    assert_eq!(
        error_fields("detectLocal:\n  interfaceNamePrefix: fifteen_bytes_x\n"),
        ["detectLocal.interfaceNamePrefix"]
    );
    assert!(load_text("detectLocal:\n  bridgeInterface: fifteen_bytes_x\n").is_ok());
    let ok = "detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: br-1a2b3c4d5e6f\n  interfaceNamePrefix: veth\n";
    assert!(load_text(ok).is_ok());
}

#[test]
fn nftables_is_validated_only_in_nftables_mode_and_then_refused() {
    assert!(load_text("nftables:\n  masqueradeBit: 40\n").is_ok());
    let fields = error_fields("mode: nftables\nnftables:\n  masqueradeBit: 40\n");
    assert!(
        fields.iter().any(|f| f == "nftables.masqueradeBit"),
        "{fields:?}"
    );
    let err = load_text("mode: nftables\n").unwrap_err();
    assert!(
        matches!(
            err.field_errors(),
            [FieldError { field, message: Problem::ModeNotServed { mode } }]
                if field == "mode" && mode == "nftables"
        ),
        "{err:?}"
    );
}

#[test]
fn all_errors_are_reported_together() {
    let err = load_text("oomScoreAdj: 5000\nclientConnection:\n  burst: -2\n")
        .map(|l| l.config)
        .unwrap_err();
    let fields: Vec<_> = err
        .field_errors()
        .iter()
        .map(|e| e.field.as_str())
        .collect();
    assert_eq!(fields, ["clientConnection.burst", "oomScoreAdj"]);
}

#[test]
fn decode_errors_name_the_field_and_the_line() {
    // The header is lines 1 and 2.
    let cases: &[(&str, &str, u64)] = &[
        ("ipvs:\n  syncPeriod: 30\n", "ipvs.syncPeriod", 4),
        ("ipvs:\n  syncPeriod: 30 seconds\n", "ipvs.syncPeriod", 4),
        ("ipvs:\n  strictARP: maybe\n", "ipvs.strictARP", 4),
        ("featureGates:\n  Foo: 1\n", "featureGates.Foo", 4),
        ("conntrack: [1]\n", "conntrack", 3),
        ("hostnameOverride: 12\n", "hostnameOverride", 3),
    ];
    for (body, field, line) in cases {
        let err = load_text(body).unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{body:?}: {err:?}");
        assert_eq!(fields_of(&err), [*field], "{body:?}: {err}");
        assert_eq!(err.line(), Some(*line), "{body:?}: {err}");
    }
    let err = load_text("ipvs: [").unwrap_err();
    assert!(err.line().is_some(), "{err:?}");
    // A quoted number where a number belongs: refused by the JSON step, named by its path.
    let err = load_text("iptables:\n  masqueradeBit: \"14\"\n").unwrap_err();
    assert!(
        matches!(&err, Error::Type { field, source }
            if field == "iptables.masqueradeBit"
                && source.classify() == serde_json::error::Category::Data),
        "{err:?}"
    );
}

/// What kube-proxy's decoder (`sigs.k8s.io/yaml`: YAML 1.1 to JSON, then Go's JSON) makes of
/// scalars: YAML 1.1 booleans are booleans, and a bool or number where a string belongs is an
/// error, not its text.
#[test]
fn scalars_are_read_as_kube_proxy_reads_them() {
    for (spelling, value) in [
        ("true", true),
        ("True", true),
        ("yes", true),
        ("on", true),
        ("y", true),
        ("false", false),
        ("no", false),
        ("off", false),
        ("n", false),
    ] {
        let c = load_text(&format!("ipvs:\n  strictARP: {spelling}\n"))
            .unwrap_or_else(|e| panic!("{spelling}: {e}"))
            .config;
        assert_eq!(c.ipvs.strict_arp, value, "{spelling}");
    }
    // A string field given what YAML 1.1 reads as a bool or a number.
    for body in [
        "hostnameOverride: yes\n",
        "hostnameOverride: on\n",
        "hostnameOverride: 12\n",
        "clusterCIDR: 10\n",
        "showHiddenMetricsForVersion: 1.33\n",
    ] {
        let field = body.split(':').next().unwrap();
        assert_eq!(error_fields(body), [field], "{body:?}");
    }
    // Quoted, they are strings.
    let c = load_text("hostnameOverride: \"yes\"\nshowHiddenMetricsForVersion: \"1.33\"\n")
        .unwrap()
        .config;
    assert_eq!(c.hostname_override, "yes");
    assert_eq!(c.show_hidden_metrics_for_version, "1.33");
    // Numbers where numbers belong; a quoted number is a string, which Go's JSON refuses.
    let c = load_text("iptables:\n  masqueradeBit: 13\nclientConnection:\n  qps: 2.5\n")
        .unwrap()
        .config;
    assert_eq!(c.iptables.masquerade_bit, Some(13));
    assert_eq!(c.client_connection.qps, 2.5);
    for body in [
        "iptables:\n  masqueradeBit: \"13\"\n",
        "iptables:\n  masqueradeBit: 13.5\n",
    ] {
        assert_eq!(error_fields(body), ["iptables.masqueradeBit"], "{body:?}");
    }
    // A bool where a number belongs, and a number where a bool belongs.
    assert_eq!(error_fields("oomScoreAdj: yes\n"), ["oomScoreAdj"]);
    assert_eq!(error_fields("ipvs:\n  strictARP: 1\n"), ["ipvs.strictARP"]);
}

/// kube-proxy decodes strictly first, where a repeated key is an error, and then leniently,
/// where YAML 1.1's maps keep the last value, with a logged warning.
#[test]
fn a_repeated_key_takes_its_last_value_leniently_and_is_refused_strictly() {
    let body = "ipvs:\n  scheduler: rr\n  scheduler: sh\n";
    let loaded = load_text(body).unwrap();
    assert_eq!(loaded.config.ipvs.scheduler, "sh");
    let twice = Warning::DuplicateKey {
        key: "scheduler".into(),
        line: 5,
    };
    assert!(loaded.warnings.contains(&twice), "{:?}", loaded.warnings);
    let text = format!("{HEAD}{body}");
    let err = KubeProxyConfiguration::from_text(&text, Decoding::Strict).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { source, .. }
            if matches!(source.without_snippet(),
                serde_saphyr::Error::DuplicateMappingKey { key: Some(k), .. } if k == "scheduler")),
        "{err:?}"
    );
    // At the top level too.
    let text = format!("{HEAD}mode: ipvs\nmode: \"\"\n");
    let (c, warnings) = KubeProxyConfiguration::from_text(&text, Decoding::Lenient).unwrap();
    assert_eq!(c.mode, "");
    assert!(
        matches!(&warnings[..], [Warning::DuplicateKey { key, line: 4 }] if key == "mode"),
        "{warnings:?}"
    );
}

#[test]
fn api_version_and_kind_are_checked() {
    let cases: &[(&str, &[&str])] = &[
        (
            "apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
            &["apiVersion"],
        ),
        (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
            &["kind"],
        ),
        ("mode: ipvs\n", &["apiVersion", "kind"]),
        ("", &["apiVersion", "kind"]),
    ];
    for (text, fields) in cases {
        let err = KubeProxyConfiguration::from_text(text, Decoding::Strict).unwrap_err();
        assert_eq!(fields_of(&err), *fields, "{text:?}: {err}");
    }
}

#[test]
fn unknown_fields_are_named_with_their_path() {
    let text = format!(
        "{HEAD}mode: ipvs\nudpIdleTimeout: 250ms\nipvs:\n  syncPeriod: 30s\n  gracefulPeriod: 5s\n"
    );
    let err = KubeProxyConfiguration::from_text(&text, Decoding::Strict).unwrap_err();
    let Error::UnknownFields(fields) = &err else {
        panic!("{err}")
    };
    assert_eq!(fields, &["udpIdleTimeout", "ipvs.gracefulPeriod"]);
    assert_eq!(
        err.to_string(),
        "strict decoding error: unknown field \"udpIdleTimeout\", unknown field \"ipvs.gracefulPeriod\""
    );
    // kube-proxy's own behaviour: decode leniently and say so.
    let (c, warnings) = KubeProxyConfiguration::from_text(&text, Decoding::Lenient).unwrap();
    assert_eq!(c.ipvs.sync_period, GoDuration::from_secs(30));
    assert_eq!(
        warnings,
        [
            Warning::UnknownField {
                field: "udpIdleTimeout".into()
            },
            Warning::UnknownField {
                field: "ipvs.gracefulPeriod".into()
            },
        ]
    );
}

#[test]
fn fields_kube_proxy_ipvs_ignores_are_warned_about_only_when_set() {
    // The field and its value as JSON; the note is the field table's.
    let ignored = |field: &str, value: &str| {
        let f = FIELDS.iter().find(|f| f.path == field).unwrap();
        Warning::Ignored {
            field: f.path,
            value: value.to_string(),
            note: f.note,
        }
    };
    let cases: Vec<(&str, Warning)> = vec![
        (
            "enableProfiling: true\n",
            ignored("enableProfiling", "true"),
        ),
        (
            "iptables:\n  syncPeriod: 1m\n",
            ignored("iptables.syncPeriod", r#""1m0s""#),
        ),
        (
            "iptables:\n  localhostNodePorts: false\n",
            ignored("iptables.localhostNodePorts", "false"),
        ),
        (
            "configSyncPeriod: 1h\n",
            ignored("configSyncPeriod", r#""1h0m0s""#),
        ),
        (
            "portRange: 300-2000\n",
            ignored("portRange", r#""300-2000""#),
        ),
        (
            "winkernel:\n  enableDSR: true\n",
            ignored("winkernel.enableDSR", "true"),
        ),
        (
            "windowsRunAsService: true\n",
            ignored("windowsRunAsService", "true"),
        ),
        (
            "nftables:\n  masqueradeAll: true\n",
            ignored("nftables.masqueradeAll", "true"),
        ),
        (
            "logging:\n  flushFrequency: 1s\n",
            ignored("logging.flushFrequency", r#""1s""#),
        ),
        (
            "bindAddress: 10.0.0.1\n",
            ignored("bindAddress", r#""10.0.0.1""#),
        ),
        (
            "featureGates:\n  MultiCIDRServiceAllocator: true\n",
            Warning::GateIgnored {
                gate: "MultiCIDRServiceAllocator".into(),
                value: true,
            },
        ),
        (
            "nodePortAddresses: [localhost]\n",
            Warning::LocalhostNodePorts,
        ),
    ];
    for (body, expected) in cases {
        let w = load_text(body).unwrap().warnings;
        assert!(w.contains(&expected), "{body:?}: {w:?}");
    }
    let w = load_text("mode: ipvs\nfeatureGates:\n  KubeProxyIPVS: true\n")
        .unwrap()
        .warnings;
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn refused_values() {
    let err = load_text("mode: iptables\n").unwrap_err();
    assert!(
        matches!(err.field_errors(), [FieldError { field, message: Problem::ModeNotServed { mode } }]
            if field == "mode" && mode == "iptables"),
        "{err:?}"
    );
    // Not a mode kube-proxy knows: its own validation refuses it.
    assert_eq!(error_fields("mode: kernelspace\n"), ["mode"]);
    let err = load_text("featureGates:\n  KubeProxyIPVS: false\n").unwrap_err();
    assert!(
        matches!(err.field_errors(), [FieldError { field, message: Problem::IpvsGateOff }]
            if field == "featureGates.KubeProxyIPVS"),
        "{err:?}"
    );
    // An empty mode means iptables to kube-proxy: accepted as ipvs, with a warning.
    let loaded = load_text("mode: \"\"\n").unwrap();
    assert_eq!(loaded.config.mode, "ipvs");
    assert!(
        loaded.warnings.contains(&Warning::EmptyMode),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn the_field_table_covers_every_field_once() {
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&path, v, out);
                }
            }
            _ => {
                out.insert(prefix.to_string());
            }
        }
    }
    let mut full = KubeProxyConfiguration::defaults();
    full.feature_gates.insert("X".into(), true);
    full.windows_run_as_service = true;
    full.logging.options.json.split_stream = true;
    full.logging.options.text.split_stream = true;
    full.logging.vmodule.push(VModule::default());
    full.ipvs.graceful_termination_timeout = Some(GoDuration::from_secs(60));
    full.ipvs.vip_binding = Some("route".into());
    full.ipvs.allowed_schedulers = vec!["lblc".into()];
    full.ipvs.service_metrics = true;
    full.ipvs.scheduler_annotation = Some(false);
    let mut paths = BTreeSet::new();
    leaves("", &serde_json::to_value(&full).unwrap(), &mut paths);
    paths.remove("featureGates.X");
    paths.insert("featureGates".into());
    let table: BTreeSet<String> = FIELDS.iter().map(|f| f.path.to_string()).collect();
    assert_eq!(table.len(), FIELDS.len(), "a field is listed twice");
    assert_eq!(paths, table);
    // Every flag named in the table is one apply_flags knows.
    for f in FIELDS.iter().filter(|f| f.flag.is_some()) {
        let flag = f.flag.unwrap();
        if flag == "windows-service" {
            continue;
        }
        let value = match flag {
            "feature-gates" => "AllBeta=true",
            "v"
            | "iptables-masquerade-bit"
            | "kube-api-burst"
            | "conntrack-min"
            | "conntrack-max-per-core"
            | "oom-score-adj" => "1",
            "kube-api-qps" => "1.5",
            "vmodule" => "sync=4",
            "log-flush-frequency" => "1s",
            "log-text-info-buffer-size" | "log-json-info-buffer-size" => "64Ki",
            "log-text-split-stream" | "log-json-split-stream" => "true",
            "logging-format" => "json",
            f if f.contains("period") || f.contains("timeout") => "2s",
            "iptables-localhost-nodeports" => "false",
            "vip-binding" => "route",
            "ipvs-strict-arp"
            | "ipvs-service-metrics"
            | "ipvs-scheduler-annotation"
            | "masquerade-all"
            | "bind-address-hard-fail"
            | "profiling"
            | "conntrack-tcp-be-liberal" => "true",
            _ => "x",
        };
        let mut c = KubeProxyConfiguration::defaults();
        let before = c.clone();
        c.apply_flags(&FlagOverrides::new().with(flag, value), false)
            .unwrap_or_else(|e| panic!("--{flag}: {e}"));
        assert_ne!(c, before, "--{flag} changed nothing");
    }
}

#[test]
fn write_config_to_round_trips() {
    let body = "mode: ipvs
clusterCIDR: 10.244.0.0/16
ipvs:
  scheduler: wlc
  syncPeriod: 1m30s
  minSyncPeriod: 2s
  excludeCIDRs: [192.168.0.0/16]
  strictARP: true
  tcpTimeout: 900s
featureGates:
  KubeProxyIPVS: true
conntrack:
  maxPerCore: 0
logging:
  verbosity: 4
  vmodule:
    - filePattern: proxier
      verbosity: 5
showHiddenMetricsForVersion: \"1.33\"
";
    let first = load_text(body).unwrap().config;
    let yaml = first.to_yaml().unwrap();
    assert!(yaml.contains("syncPeriod: 1m30s"), "{yaml}");
    assert!(yaml.contains("tcpTimeout: 15m0s"), "{yaml}");
    assert!(
        yaml.starts_with("apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"),
        "{yaml}"
    );
    let (again, warnings) = KubeProxyConfiguration::from_text(&yaml, Decoding::Strict).unwrap();
    assert!(warnings.is_empty());
    let mut again = again;
    again.apply_defaults();
    again.validate().unwrap();
    assert_eq!(again, first);
    // The defaults alone round-trip as well.
    let d = KubeProxyConfiguration::defaults();
    let (back, _) =
        KubeProxyConfiguration::from_text(&d.to_yaml().unwrap(), Decoding::Strict).unwrap();
    assert_eq!(back, d);
}

#[test]
fn a_failed_write_config_to_is_a_write_error_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("no-such-dir-{}", std::process::id()));
    let path = dir.join("config.yaml");
    let e = KubeProxyConfiguration::defaults()
        .write_to(&path)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Write { path: p, .. } if *p == path),
        "{e:?}"
    );
}

#[test]
fn explicit_flags_override_the_file_with_a_warning() {
    let flags = FlagOverrides::new()
        .with("ipvs-scheduler", "sh")
        .with("ipvs-exclude-cidrs", "10.0.0.0/8,10.1.0.0/16")
        .with("hostname-override", " Node-B ")
        .with("v", "3")
        .with("healthz-port", "0")
        .with("manifests", "/tmp/m.yaml");
    let loaded = load_text_with("ipvs:\n  scheduler: wrr\n", &flags).unwrap();
    let c = &loaded.config;
    assert_eq!(c.ipvs.scheduler, "sh");
    assert_eq!(c.ipvs.exclude_cidrs, ["10.0.0.0/8", "10.1.0.0/16"]);
    assert_eq!(c.node_name().as_deref(), Some("node-b"));
    assert_eq!(c.logging.verbosity, 3);
    assert_eq!(c.healthz_address(), None);
    let overrides: Vec<(&str, &str)> = loaded
        .warnings
        .iter()
        .filter_map(|w| match w {
            Warning::FlagOverridesFile { flag, field } => Some((flag.as_str(), *field)),
            _ => None,
        })
        .collect();
    // hostname-override and -v are honoured by kube-proxy too: no warning for them.
    assert_eq!(
        overrides,
        [
            ("healthz-port", "healthzBindAddress"),
            ("ipvs-exclude-cidrs", "ipvs.excludeCIDRs"),
            ("ipvs-scheduler", "ipvs.scheduler"),
        ],
        "{:?}",
        loaded.warnings
    );
    // Without a file there is nothing to override and nothing to warn about.
    let loaded = load(None, &flags, Decoding::Strict).unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(loaded.config.mode, "ipvs");
}

#[test]
fn bad_flag_values_name_the_flag() {
    type Is = fn(&Problem) -> bool;
    let cases: [(&str, &str, Is); 6] = [
        ("ipvs-sync-period", "soon", |p| {
            matches!(p, Problem::Duration(_))
        }),
        (
            "masquerade-all",
            "yes",
            |p| matches!(p, Problem::NotA { value, expected: Expected::Boolean } if value == "yes"),
        ),
        ("hostname-override", "  ", |p| {
            matches!(p, Problem::EmptyHostnameOverride)
        }),
        (
            "feature-gates",
            "KubeProxyIPVS",
            |p| matches!(p, Problem::Gate(gates::GateError::Syntax { pair }) if pair == "KubeProxyIPVS"),
        ),
        (
            "oom-score-adj",
            "x",
            |p| matches!(p, Problem::NotA { value, expected: Expected::Integer } if value == "x"),
        ),
        (
            "vip-binding",
            "routes",
            |p| matches!(p, Problem::VipBinding(b) if b.0 == "routes"),
        ),
    ];
    for (flag, value, is) in cases {
        let err = load(
            None,
            &FlagOverrides::new().with(flag, value),
            Decoding::Strict,
        )
        .unwrap_err();
        let field = format!("--{flag}");
        assert!(
            matches!(err.field_errors(), [e] if e.field == field && is(&e.message)),
            "{err:?}"
        );
    }
    // Flag values are validated like file values.
    let err = load(
        None,
        &FlagOverrides::new().with("ipvs-min-sync-period", "1m"),
        Decoding::Strict,
    )
    .unwrap_err();
    assert_eq!(fields_of(&err), ["ipvs.minSyncPeriod"], "{err}");
}

#[test]
fn flags_are_read_from_clap_matches_only_when_given() {
    use clap::{Arg, ArgAction, Command};
    let cmd = Command::new("t")
        .arg(
            Arg::new("ipvs_sync_period")
                .long("ipvs-sync-period")
                .default_value("30s"),
        )
        .arg(
            Arg::new("masquerade_all")
                .long("masquerade-all")
                .action(ArgAction::SetTrue),
        )
        .arg(
            Arg::new("ipvs_strict_arp")
                .long("ipvs-strict-arp")
                .action(ArgAction::SetTrue),
        )
        .arg(
            Arg::new("cluster_cidr")
                .long("cluster-cidr")
                .value_delimiter(',')
                .action(ArgAction::Append),
        )
        .arg(
            Arg::new("verbosity")
                .short('v')
                .long("v")
                .default_value("0"),
        );
    let m = cmd
        .clone()
        .try_get_matches_from([
            "t",
            "--masquerade-all",
            "--cluster-cidr",
            "10.0.0.0/8,fd00::/48",
            "-v",
            "2",
        ])
        .unwrap();
    let flags = FlagOverrides::from_matches(&cmd, &m);
    assert_eq!(flags.get("ipvs-sync-period"), None);
    assert_eq!(flags.get("ipvs-strict-arp"), None);
    assert_eq!(flags.get("masquerade-all"), Some(&["true".to_string()][..]));
    assert_eq!(flags.get("v"), Some(&["2".to_string()][..]));
    let mut c = KubeProxyConfiguration::defaults();
    c.apply_flags(&flags, false).unwrap();
    assert!(c.iptables.masquerade_all);
    assert_eq!(c.cluster_cidr, "10.0.0.0/8,fd00::/48");
    assert_eq!(c.logging.verbosity, 2);
    assert_eq!(c.ipvs.sync_period, GoDuration::from_secs(30));
}

#[test]
fn to_proxy_config_maps_every_model_setting() {
    let body = "mode: ipvs
ipvs:
  scheduler: lc
  excludeCIDRs: [10.9.0.0/16]
iptables:
  masqueradeAll: true
  masqueradeBit: 13
detectLocalMode: InterfaceNamePrefix
detectLocal:
  interfaceNamePrefix: veth
nodePortAddresses: [all]
";
    let c = load_text(body).unwrap().config;
    let p = c.to_proxy_config("n1").unwrap();
    assert_eq!(p.node_name, "n1");
    assert_eq!(p.scheduler, "lc");
    assert!(p.masquerade_all);
    assert_eq!(p.masquerade_mark(), 1 << 13);
    assert_eq!(
        p.local_detector,
        LocalDetector::InterfaceNamePrefix("veth".into())
    );
    assert_eq!(
        p.exclude_cidrs,
        vec!["10.9.0.0/16".parse::<IpNet>().unwrap()]
    );
    assert_eq!(p.nodeport_addresses.len(), 2);
    // An IPv4 cluster CIDR turns no family off, as in kube-proxy; the host decides.
    assert_eq!(p.families, vec![Family::V4, Family::V6]);
    let c = load_text("nodePortAddresses: [primary]\ndetectLocalMode: NodeCIDR\n")
        .unwrap()
        .config;
    let p = c.to_proxy_config("n1").unwrap();
    assert!(p.nodeport_addresses.is_empty());
    assert!(p.nodeport_primary);
    assert_eq!(p.local_detector, LocalDetector::NodeCidr(Vec::new()));
    let p = KubeProxyConfiguration::defaults()
        .to_proxy_config("n1")
        .unwrap();
    assert_eq!(p.local_detector, LocalDetector::None);
}

/// Addresses and CIDRs as kube-proxy's validation reads them (`ParseIPSloppy`,
/// `ParseCIDRSloppy`): leading zeros are decimal, host bits are masked off, and the port of
/// an `IP:port` is `strconv.Atoi`'s.
#[test]
fn addresses_and_cidrs_are_read_as_kube_proxy_reads_them() {
    let body = "mode: ipvs
bindAddress: 010.000.000.001
healthzBindAddress: 127.000.000.001:010256
metricsBindAddress: '[::1]:+10249'
clusterCIDR: 010.244.0.0/016
ipvs:
  excludeCIDRs: [010.9.1.1/16]
nodePortAddresses: [192.168.001.000/024]
";
    let c = load_text(body).unwrap().config;
    let p = c.to_proxy_config("n1").unwrap();
    assert_eq!(p.bind_address, Some("10.0.0.1".parse().unwrap()));
    assert_eq!(
        p.exclude_cidrs,
        vec!["10.9.0.0/16".parse::<IpNet>().unwrap()]
    );
    assert_eq!(
        p.nodeport_addresses,
        vec!["192.168.1.0/24".parse::<IpNet>().unwrap()]
    );
    assert_eq!(
        parse_host_port(&c.healthz_bind_address).unwrap(),
        "127.0.0.1:10256".parse().unwrap()
    );
    assert_eq!(
        parse_host_port(&c.metrics_bind_address).unwrap(),
        "[::1]:10249".parse().unwrap()
    );
    for bad in [
        "1.2.3.4",
        "1.2.3.4:",
        "1.2.3.4:x",
        "::1:80",
        "[::1]80",
        "1.2.3.4:65536",
        "256.0.0.1:80",
        "1.2.3.4:-1",
    ] {
        assert!(parse_host_port(bad).is_err(), "{bad}");
    }
    assert!(matches!(
        parse_host_port("1.2.3.4:000"),
        Err(Problem::PortZero { .. })
    ));
}

#[test]
fn conntrack_sysctls_are_kube_proxys() {
    let c = KubeProxyConfiguration::defaults();
    assert_eq!(
        c.conntrack_sysctls(2),
        vec![
            (
                "net/netfilter/nf_conntrack_max".to_string(),
                "131072".to_string()
            ),
            (
                "net/netfilter/nf_conntrack_tcp_timeout_established".to_string(),
                "86400".to_string()
            ),
            (
                "net/netfilter/nf_conntrack_tcp_timeout_close_wait".to_string(),
                "3600".to_string()
            ),
        ]
    );
    assert_eq!(c.conntrack_sysctls(8)[0].1, "262144");
    let c = load_text("conntrack:\n  maxPerCore: 0\n  tcpEstablishedTimeout: 0s\n  tcpCloseWaitTimeout: 0s\n  udpTimeout: 30s\n  tcpBeLiberal: true\n")
        .unwrap()
        .config;
    assert_eq!(
        c.conntrack_sysctls(4),
        vec![
            (
                "net/netfilter/nf_conntrack_udp_timeout".to_string(),
                "30".to_string()
            ),
            (
                "net/netfilter/nf_conntrack_tcp_be_liberal".to_string(),
                "1".to_string()
            ),
        ]
    );
}

#[test]
fn the_graceful_termination_bound_is_read_from_the_file_and_a_flag_overrides_it() {
    use crate::model::snapshot::config::DEFAULT_GRACEFUL_TERMINATION_TIMEOUT;
    let bound = |text: &str, flags: FlagOverrides| {
        let (mut c, _) =
            KubeProxyConfiguration::from_text(&format!("{HEAD}{text}"), Decoding::Strict)?;
        c.apply_flags(&flags, true)?;
        c.to_proxy_config("node-a")
            .map(|p| p.graceful_termination_timeout)
    };
    assert_eq!(
        bound("mode: ipvs\n", FlagOverrides::new()).unwrap(),
        DEFAULT_GRACEFUL_TERMINATION_TIMEOUT
    );
    assert_eq!(
        bound(
            "mode: ipvs\nipvs:\n  gracefulTerminationTimeout: 2m\n",
            FlagOverrides::new()
        )
        .unwrap(),
        Duration::from_secs(120)
    );
    assert_eq!(
        bound(
            "mode: ipvs\nipvs:\n  gracefulTerminationTimeout: 2m\n",
            FlagOverrides::new().with("ipvs-graceful-termination-timeout", "0s")
        )
        .unwrap(),
        Duration::ZERO
    );
    let err = bound(
        "mode: ipvs\nipvs:\n  gracefulTerminationTimeout: -1s\n",
        FlagOverrides::new(),
    )
    .unwrap_err();
    assert_eq!(
        fields_of(&err),
        ["ipvs.gracefulTerminationTimeout"],
        "{err}"
    );
    // Unset, the effective configuration written back is kube-proxy's own.
    let (c, _) =
        KubeProxyConfiguration::from_text(&format!("{HEAD}mode: ipvs\n"), Decoding::Strict)
            .unwrap();
    assert!(!c.to_yaml().unwrap().contains("gracefulTerminationTimeout"));
}

#[test]
fn the_vip_binding_is_read_from_the_file_and_a_flag_overrides_it() {
    use crate::model::snapshot::config::VipBinding;
    let binding = |text: &str, flags: FlagOverrides| {
        let (mut c, _) =
            KubeProxyConfiguration::from_text(&format!("{HEAD}{text}"), Decoding::Strict)?;
        c.apply_flags(&flags, true)?;
        c.to_proxy_config("node-a").map(|p| p.vip_binding)
    };
    assert_eq!(
        binding("mode: ipvs\n", FlagOverrides::new()).unwrap(),
        VipBinding::Address
    );
    assert_eq!(
        binding(
            "mode: ipvs\nipvs:\n  vipBinding: route\n",
            FlagOverrides::new()
        )
        .unwrap(),
        VipBinding::Route
    );
    assert_eq!(
        binding(
            "mode: ipvs\nipvs:\n  vipBinding: route\n",
            FlagOverrides::new().with("vip-binding", "address")
        )
        .unwrap(),
        VipBinding::Address
    );
    let err = binding(
        "mode: ipvs\n",
        FlagOverrides::new().with("vip-binding", "routes"),
    )
    .unwrap_err();
    assert_eq!(fields_of(&err), ["--vip-binding"], "{err}");
    let err = binding(
        "mode: ipvs\nipvs:\n  vipBinding: addresses\n",
        FlagOverrides::new(),
    )
    .unwrap_err();
    assert_eq!(fields_of(&err), ["ipvs.vipBinding"], "{err}");
    // Unset, the effective configuration written back is kube-proxy's own.
    let (c, _) =
        KubeProxyConfiguration::from_text(&format!("{HEAD}mode: ipvs\n"), Decoding::Strict)
            .unwrap();
    assert!(!c.to_yaml().unwrap().contains("vipBinding"));
}
