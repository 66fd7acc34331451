use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

use super::parse::missing;
use super::*;
use crate::model::snapshot::cluster::*;

fn parse<T: k8s_openapi::serde::de::DeserializeOwned>(yaml: &str) -> T {
    match serde_saphyr::from_str(yaml) {
        Ok(v) => v,
        Err(e) => panic!("fixture does not parse: {e}\n{yaml}"),
    }
}

/// A Service `default/web` with `spec` (and optionally `status`) given as YAML.
fn svc(spec: &str) -> core::Service {
    parse(&format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\n{spec}"
    ))
}

fn slice(body: &str) -> discovery::EndpointSlice {
    parse(&format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n{body}"
    ))
}

fn node_of(body: &str) -> core::Node {
    parse(&format!("apiVersion: v1\nkind: Node\n{body}"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn ok_service(spec: &str) -> Service {
    match service(&svc(spec)) {
        Ok(Some(s)) => s,
        other => panic!("expected a Service, got {other:?}\n{spec}"),
    }
}

fn ok_slice(body: &str) -> EndpointSlice {
    match endpoint_slice(&slice(body)) {
        Ok(Some(s)) => s,
        other => panic!("expected a slice, got {other:?}\n{body}"),
    }
}

fn s(v: &str) -> String {
    v.to_owned()
}

#[test]
fn service_errors_name_the_field() {
    let p80 = "  ports: [{port: 80}]\n";
    let cases: Vec<(&str, String, Reason)> = vec![
        (
            "bad cluster IP",
            "spec:\n  clusterIP: 10.0.0.300\n".into(),
            Reason::BadIp {
                field: s("spec.clusterIPs[0]"),
                value: s("10.0.0.300"),
            },
        ),
        (
            "bad second cluster IP",
            "spec:\n  clusterIPs: [10.0.0.1, 'fd00::x']\n".into(),
            Reason::BadIp {
                field: s("spec.clusterIPs[1]"),
                value: s("fd00::x"),
            },
        ),
        (
            "two cluster IPs of one family",
            "spec:\n  clusterIPs: [10.0.0.1, 10.0.0.2]\n".into(),
            Reason::FamilyMismatch {
                field: s("spec.clusterIPs[1]"),
                value: ip("10.0.0.2"),
                expected: FamilyName(Family::V6),
            },
        ),
        (
            "cluster IP not of its ipFamilies entry",
            "spec:\n  clusterIP: 10.0.0.1\n  ipFamilies: [IPv6]\n".into(),
            Reason::FamilyMismatch {
                field: s("spec.clusterIPs[0]"),
                value: ip("10.0.0.1"),
                expected: FamilyName(Family::V6),
            },
        ),
        (
            "unknown ipFamilies entry",
            "spec:\n  clusterIP: 10.0.0.1\n  ipFamilies: [IPv5]\n".into(),
            Reason::UnknownValue {
                field: s("spec.ipFamilies[0]"),
                value: s("IPv5"),
                expected: "IPv4 or IPv6",
            },
        ),
        (
            "three cluster IPs",
            "spec:\n  clusterIPs: [10.0.0.1, 'fd00::1', 10.0.0.2]\n".into(),
            Reason::TooManyClusterIps { count: 3 },
        ),
        (
            "clusterIP and clusterIPs disagree",
            "spec:\n  clusterIP: 10.0.0.1\n  clusterIPs: [10.0.0.2]\n".into(),
            Reason::ClusterIpMismatch {
                cluster_ip: s("10.0.0.1"),
                cluster_ips: s("10.0.0.2"),
            },
        ),
        (
            "port 0",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 0}]\n".into(),
            Reason::BadPort {
                field: s("spec.ports[0].port"),
                value: 0,
            },
        ),
        (
            "port above 65535",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{name: a, port: 80}, {name: b, port: 65536}]\n"
                .into(),
            Reason::BadPort {
                field: s("spec.ports[1].port"),
                value: 65536,
            },
        ),
        (
            "negative port",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: -1}]\n".into(),
            Reason::BadPort {
                field: s("spec.ports[0].port"),
                value: -1,
            },
        ),
        (
            "unknown protocol",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 80, protocol: ICMP}]\n".into(),
            Reason::UnknownProtocol {
                field: s("spec.ports[0].protocol"),
                value: s("ICMP"),
            },
        ),
        (
            "protocol names are case-sensitive",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 80, protocol: tcp}]\n".into(),
            Reason::UnknownProtocol {
                field: s("spec.ports[0].protocol"),
                value: s("tcp"),
            },
        ),
        (
            "same port and protocol twice",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{name: a, port: 80}, {name: b, port: 80, protocol: TCP}]\n"
                .into(),
            Reason::DuplicatePort {
                field: s("spec.ports[1].port"),
                port: 80,
                protocol: Protocol::Tcp,
                first: s("spec.ports[0].port"),
            },
        ),
        (
            "same name twice",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{name: a, port: 80}, {name: a, port: 81}]\n"
                .into(),
            Reason::DuplicatePortName {
                field: s("spec.ports[1].name"),
                name: s("a"),
                first: s("spec.ports[0].name"),
            },
        ),
        (
            "two unnamed ports",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 80}, {port: 81}]\n".into(),
            Reason::DuplicatePortName {
                field: s("spec.ports[1].name"),
                name: s(""),
                first: s("spec.ports[0].name"),
            },
        ),
        (
            "same node port and protocol twice",
            "spec:\n  type: NodePort\n  clusterIP: 10.0.0.1\n  ports: [{name: a, port: 80, nodePort: 30080}, {name: b, port: 81, nodePort: 30080}]\n"
                .into(),
            Reason::DuplicatePort {
                field: s("spec.ports[1].nodePort"),
                port: 30080,
                protocol: Protocol::Tcp,
                first: s("spec.ports[0].nodePort"),
            },
        ),
        (
            "node port out of range",
            "spec:\n  type: NodePort\n  clusterIP: 10.0.0.1\n  ports: [{port: 80, nodePort: 70000}]\n"
                .into(),
            Reason::BadPort {
                field: s("spec.ports[0].nodePort"),
                value: 70000,
            },
        ),
        (
            "node port on a ClusterIP Service",
            "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 80, nodePort: 30080}]\n".into(),
            Reason::NodePortNotAllowed {
                field: s("spec.ports[0].nodePort"),
                service_type: "ClusterIP",
            },
        ),
        (
            "unknown type",
            format!("spec:\n  type: Internal\n  clusterIP: 10.0.0.1\n{p80}"),
            Reason::UnknownValue {
                field: s("spec.type"),
                value: s("Internal"),
                expected: "ClusterIP, NodePort, LoadBalancer or ExternalName",
            },
        ),
        (
            "unknown session affinity",
            format!("spec:\n  clusterIP: 10.0.0.1\n  sessionAffinity: Cookie\n{p80}"),
            Reason::UnknownValue {
                field: s("spec.sessionAffinity"),
                value: s("Cookie"),
                expected: "None or ClientIP",
            },
        ),
        (
            "session affinity timeout 0",
            format!(
                "spec:\n  clusterIP: 10.0.0.1\n  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: 0}}}}\n{p80}"
            ),
            Reason::BadTimeout {
                field: s("spec.sessionAffinityConfig.clientIP.timeoutSeconds"),
                value: 0,
            },
        ),
        (
            "session affinity timeout over a day",
            format!(
                "spec:\n  clusterIP: 10.0.0.1\n  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: 86401}}}}\n{p80}"
            ),
            Reason::BadTimeout {
                field: s("spec.sessionAffinityConfig.clientIP.timeoutSeconds"),
                value: 86401,
            },
        ),
        (
            "external traffic policy in lower case",
            format!("spec:\n  type: NodePort\n  clusterIP: 10.0.0.1\n  externalTrafficPolicy: local\n{p80}"),
            Reason::UnknownValue {
                field: s("spec.externalTrafficPolicy"),
                value: s("local"),
                expected: "Cluster or Local",
            },
        ),
        (
            "unknown internal traffic policy",
            format!("spec:\n  clusterIP: 10.0.0.1\n  internalTrafficPolicy: Node\n{p80}"),
            Reason::UnknownValue {
                field: s("spec.internalTrafficPolicy"),
                value: s("Node"),
                expected: "Cluster or Local",
            },
        ),
        (
            "health check node port out of range",
            format!(
                "spec:\n  type: LoadBalancer\n  clusterIP: 10.0.0.1\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 65536\n{p80}"
            ),
            Reason::BadPort {
                field: s("spec.healthCheckNodePort"),
                value: 65536,
            },
        ),
        ("no spec", String::new(), missing("spec")),
    ];
    for (what, spec, want) in cases {
        let got = service(&svc(&spec));
        let want = ConvertError {
            object: ObjectRef {
                kind: Kind::Service,
                namespace: Some(s("default")),
                name: Some(s("web")),
            },
            reason: Box::new(want),
        };
        assert_eq!(got, Err(want), "{what}");
    }
}

#[test]
fn service_without_a_name_is_rejected_and_named_as_such() {
    let svc: core::Service = parse(
        "apiVersion: v1\nkind: Service\nmetadata: {namespace: shop}\nspec: {clusterIP: 10.0.0.1}\n",
    );
    let err = service(&svc).unwrap_err();
    assert_eq!(*err.reason, missing("metadata.name"));
    assert_eq!(
        err.to_string(),
        "Service shop/<unnamed>: metadata.name is required"
    );
}

#[test]
fn error_messages_name_object_and_reason() {
    let err = service(&svc(
        "spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 80, protocol: ICMP}]\n",
    ))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Service default/web: spec.ports[0].protocol: unknown protocol \"ICMP\" (expected TCP, UDP or SCTP)"
    );
}

#[test]
fn service_defaults() {
    let got = ok_service("spec:\n  clusterIP: 10.0.0.1\n  ports: [{port: 80}]\n");
    assert_eq!(
        got,
        Service {
            id: ServiceRef::new("default", "web"),
            kind: ServiceType::ClusterIp,
            cluster_ips: vec![ip("10.0.0.1")],
            ports: vec![ServicePort {
                name: String::new(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: None,
            }],
            external_ips: vec![],
            load_balancer_ips: vec![],
            session_affinity: None,
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            health_check_node_port: None,
            load_balancer_source_ranges: vec![],
            scheduler: None,
        }
    );
}

#[test]
fn missing_namespace_is_default() {
    let svc: core::Service = parse(
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.0.0.1}\n",
    );
    let got = service(&svc).unwrap().unwrap();
    assert_eq!(got.id, ServiceRef::new("default", "web"));
}

#[test]
fn service_fields_as_kube_proxy_reads_them() {
    type Check = fn(&Service);
    let cases: Vec<(&str, &str, Check)> = vec![
        (
            "dual-stack from clusterIPs",
            "spec:\n  clusterIP: 10.0.0.1\n  clusterIPs: [10.0.0.1, 'fd00::1']\n  ipFamilies: [IPv4, IPv6]\n",
            |s| assert_eq!(s.cluster_ips, vec![ip("10.0.0.1"), ip("fd00::1")]),
        ),
        (
            "clusterIPs alone",
            "spec:\n  clusterIPs: ['fd00::1']\n",
            |s| assert_eq!(s.cluster_ips, vec![ip("fd00::1")]),
        ),
        (
            "empty clusterIPs falls back to clusterIP",
            "spec:\n  clusterIP: 10.0.0.1\n  clusterIPs: []\n",
            |s| assert_eq!(s.cluster_ips, vec![ip("10.0.0.1")]),
        ),
        (
            "headless: None",
            "spec:\n  clusterIP: None\n  ports: [{port: 80}]\n",
            |s| {
                assert!(s.cluster_ips.is_empty());
                assert_eq!(s.ports.len(), 1);
            },
        ),
        (
            "headless: clusterIPs None",
            "spec:\n  clusterIPs: [None]\n",
            |s| assert!(s.cluster_ips.is_empty()),
        ),
        (
            "no cluster IP at all",
            "spec:\n  ports: [{port: 80}]\n",
            |s| assert!(s.cluster_ips.is_empty()),
        ),
        (
            "ExternalName keeps nothing, whatever its spec says",
            "spec:\n  type: ExternalName\n  externalName: example.com\n  clusterIP: bogus\n  ports: [{port: 0, protocol: ICMP}]\n",
            |s| {
                assert_eq!(s.kind, ServiceType::ExternalName);
                assert!(s.cluster_ips.is_empty() && s.ports.is_empty());
            },
        ),
        (
            "ports: names, protocols, node ports; 0 means unallocated",
            "spec:\n  type: NodePort\n  clusterIP: 10.0.0.1\n  ports:\n  - {name: http, port: 80, nodePort: 30080}\n  - {name: dns, port: 53, protocol: UDP, nodePort: 30053}\n  - {name: dns-tcp, port: 53, protocol: TCP, nodePort: 30053}\n  - {name: sctp, port: 9, protocol: SCTP, nodePort: 0}\n",
            |s| {
                assert_eq!(s.kind, ServiceType::NodePort);
                let got: Vec<_> = s
                    .ports
                    .iter()
                    .map(|p| (p.name.as_str(), p.protocol, p.port, p.node_port))
                    .collect();
                assert_eq!(
                    got,
                    vec![
                        ("http", Protocol::Tcp, 80, Some(30080)),
                        ("dns", Protocol::Udp, 53, Some(30053)),
                        ("dns-tcp", Protocol::Tcp, 53, Some(30053)),
                        ("sctp", Protocol::Sctp, 9, None),
                    ]
                );
            },
        ),
        (
            "external IPs of both families are kept",
            "spec:\n  clusterIP: 10.0.0.1\n  externalIPs: [203.0.113.1, '2001:db8::1']\n",
            |s| assert_eq!(s.external_ips, vec![ip("203.0.113.1"), ip("2001:db8::1")]),
        ),
        (
            "load-balancer ingress: VIP and unset ipMode kept, Proxy and hostname-only skipped",
            "spec:\n  type: LoadBalancer\n  clusterIP: 10.0.0.1\nstatus:\n  loadBalancer:\n    ingress:\n    - {ip: 192.0.2.1}\n    - {ip: 192.0.2.2, ipMode: VIP}\n    - {ip: 192.0.2.3, ipMode: Proxy}\n    - {hostname: lb.example.com}\n    - {ip: 192.0.2.1}\n",
            |s| assert_eq!(s.load_balancer_ips, vec![ip("192.0.2.1"), ip("192.0.2.2")]),
        ),
        (
            "load-balancer ingress of a ClusterIP Service is stale status",
            "spec:\n  clusterIP: 10.0.0.1\nstatus:\n  loadBalancer:\n    ingress: [{ip: 192.0.2.1}]\n",
            |s| assert!(s.load_balancer_ips.is_empty()),
        ),
        (
            "ClientIP affinity defaults to 10800 s",
            "spec:\n  clusterIP: 10.0.0.1\n  sessionAffinity: ClientIP\n",
            |s| assert_eq!(s.session_affinity, Some(Duration::from_secs(10_800))),
        ),
        (
            "ClientIP affinity with its timeout",
            "spec:\n  clusterIP: 10.0.0.1\n  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 86400}}\n",
            |s| assert_eq!(s.session_affinity, Some(Duration::from_secs(86_400))),
        ),
        (
            "affinity None ignores its config",
            "spec:\n  clusterIP: 10.0.0.1\n  sessionAffinity: None\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}\n",
            |s| assert_eq!(s.session_affinity, None),
        ),
        (
            "traffic policies and health check port",
            "spec:\n  type: LoadBalancer\n  clusterIP: 10.0.0.1\n  externalTrafficPolicy: Local\n  internalTrafficPolicy: Local\n  healthCheckNodePort: 32000\n",
            |s| {
                assert_eq!(s.external_traffic_policy, TrafficPolicy::Local);
                assert_eq!(s.internal_traffic_policy, TrafficPolicy::Local);
                assert_eq!(s.health_check_node_port, Some(32000));
            },
        ),
        (
            "explicit Cluster policies",
            "spec:\n  clusterIP: 10.0.0.1\n  externalTrafficPolicy: Cluster\n  internalTrafficPolicy: Cluster\n",
            |s| {
                assert_eq!(s.external_traffic_policy, TrafficPolicy::Cluster);
                assert_eq!(s.internal_traffic_policy, TrafficPolicy::Cluster);
            },
        ),
        (
            "source ranges are trimmed and masked",
            "spec:\n  type: LoadBalancer\n  clusterIP: 10.0.0.1\n  loadBalancerSourceRanges: [' 10.1.2.3/8 ', '2001:db8::/32']\n",
            |s| {
                assert_eq!(
                    s.load_balancer_source_ranges,
                    vec![net("10.0.0.0/8"), net("2001:db8::/32")]
                )
            },
        ),
        (
            "leading zeros read as decimal, as ParseIPSloppy reads stored objects",
            "spec:\n  type: LoadBalancer\n  clusterIP: 010.000.000.001\n  externalIPs: ['203.0.113.010']\n  loadBalancerSourceRanges: ['010.1.2.3/08']\nstatus:\n  loadBalancer:\n    ingress: [{ip: '192.0.2.001'}]\n",
            |s| {
                assert_eq!(s.cluster_ips, vec![ip("10.0.0.1")]);
                assert_eq!(s.external_ips, vec![ip("203.0.113.10")]);
                assert_eq!(s.load_balancer_ips, vec![ip("192.0.2.1")]);
                assert_eq!(s.load_balancer_source_ranges, vec![net("10.0.0.0/8")]);
            },
        ),
        (
            "an IPv4-mapped IPv6 address is IPv4, as Go's To4 says",
            "spec:\n  clusterIP: 10.0.0.1\n  externalIPs: ['::ffff:203.0.113.9']\n",
            |s| assert_eq!(s.external_ips, vec![ip("203.0.113.9")]),
        ),
        (
            "bad external IPs, ingress IPs and source ranges are skipped, not the Service",
            "spec:\n  type: LoadBalancer\n  clusterIP: 10.0.0.1\n  externalIPs: [203.0.113.1, example.com, '']\n  loadBalancerSourceRanges: [10.0.0.0/8, 192.168.0.0/33, 192.0.2.7, '']\nstatus:\n  loadBalancer:\n    ingress: [{ip: 'not-an-ip'}, {ip: 192.0.2.1}]\n",
            |s| {
                assert_eq!(s.external_ips, vec![ip("203.0.113.1")]);
                assert_eq!(s.load_balancer_ips, vec![ip("192.0.2.1")]);
                assert_eq!(s.load_balancer_source_ranges, vec![net("10.0.0.0/8")]);
            },
        ),
    ];
    for (what, spec, check) in cases {
        let got = ok_service(spec);
        eprintln!("case: {what}");
        check(&got);
    }
}

#[test]
fn services_kube_proxy_does_not_watch_are_skipped_not_rejected() {
    // Even an invalid spec: kube-proxy never sees these objects.
    let svc: core::Service = parse(&format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  labels: {{'{SERVICE_PROXY_NAME_LABEL}': x}}\nspec: {{clusterIP: bogus}}\n"
    ));
    assert_eq!(service(&svc), Ok(None));
    // kube-proxy selects Services by the proxy-name label alone: a Service labelled headless
    // is served (the differential corpus, 060).
    let svc: core::Service = parse(&format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  labels: {{'{HEADLESS_LABEL}': ''}}\nspec: {{clusterIP: 10.96.0.9}}\n"
    ));
    assert!(matches!(service(&svc), Ok(Some(_))));
}

const SLICE_META: &str =
    "metadata:\n  name: web-abc\n  namespace: shop\n  labels: {kubernetes.io/service-name: web}\n";

#[test]
fn a_slice_without_endpoints_is_an_empty_slice() {
    // The API lets `endpoints` be left out (k8s-openapi v1_37 reads it as absent): a Service
    // scaled to zero, as kube-proxy reads it, not a malformed object.
    let got = ok_slice(&format!(
        "{SLICE_META}addressType: IPv4\nports: [{{port: 8080}}]\n"
    ));
    assert!(got.endpoints.is_empty(), "{got:?}");
    assert_eq!(got.ports.len(), 1);
}

#[test]
fn endpoint_slice_defaults() {
    let got = ok_slice(&format!(
        "{SLICE_META}addressType: IPv4\nports: [{{port: 8080}}]\nendpoints:\n- addresses: [10.244.0.2]\n"
    ));
    assert_eq!(
        got,
        EndpointSlice {
            name: "web-abc".into(),
            service: ServiceRef::new("shop", "web"),
            family: Family::V4,
            ports: vec![EndpointPort {
                name: String::new(),
                protocol: Protocol::Tcp,
                port: 8080,
            }],
            endpoints: vec![Endpoint {
                address: ip("10.244.0.2"),
                ready: true,
                serving: true,
                terminating: false,
                node_name: None,
                zone: None,
                hints: None,
            }],
            trigger_time: None,
        }
    );
}

#[test]
fn the_last_change_trigger_time_is_read_and_a_malformed_one_ignored() {
    let with = |value: &str| {
        ok_slice(&format!(
            "metadata:\n  name: web-abc\n  namespace: shop\n  labels: {{kubernetes.io/service-name: web}}\n  \
             annotations: {{endpoints.kubernetes.io/last-change-trigger-time: '{value}'}}\n\
             addressType: IPv4\nports: [{{port: 8080}}]\nendpoints: []\n"
        ))
        .trigger_time
    };
    let t = with("2026-11-25T06:30:00.250Z").expect("a time");
    assert_eq!(
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis(),
        1_795_588_200_250
    );
    assert_eq!(
        with("2026-11-25T07:30:00+01:00"),
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_588_200))
    );
    // kube-proxy logs and ignores one it cannot parse: the slice still counts.
    assert_eq!(with("yesterday"), None);
}

#[test]
fn endpoint_conditions_default_as_kube_proxy_reads_them() {
    // (conditions, ready, serving, terminating). An absent `serving` is true, as kube-proxy's
    // `addEndpoints` reads it, not `ready` as the API's field doc suggests.
    let cases = [
        ("{}", true, true, false),
        ("{ready: false}", false, true, false),
        ("{ready: false, terminating: true}", false, true, true),
        (
            "{ready: false, serving: true, terminating: true}",
            false,
            true,
            true,
        ),
        ("{serving: false}", true, false, false),
        (
            "{ready: true, serving: true, terminating: false}",
            true,
            true,
            false,
        ),
    ];
    for (conditions, ready, serving, terminating) in cases {
        let got = ok_slice(&format!(
            "{SLICE_META}addressType: IPv4\nendpoints:\n- {{addresses: [10.244.0.2], conditions: {conditions}}}\n"
        ));
        let ep = &got.endpoints[0];
        assert_eq!(
            (ep.ready, ep.serving, ep.terminating),
            (ready, serving, terminating),
            "{conditions}"
        );
    }
}

#[test]
fn endpoint_slice_fields() {
    let got = ok_slice(&format!(
        "{SLICE_META}addressType: IPv6
ports:
- {{name: http, port: 8080, protocol: TCP}}
- {{name: all}}
- {{name: dns, port: 53, protocol: UDP}}
- {{name: s, port: 9, protocol: SCTP}}
endpoints:
- addresses: ['fd00::2', 'fd00::3']
  nodeName: node-a
  zone: z1
  hints: {{forZones: [{{name: z1}}, {{name: z2}}], forNodes: [{{name: node-a}}]}}
"
    ));
    assert_eq!(got.family, Family::V6);
    let ports: Vec<_> = got
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.protocol, p.port))
        .collect();
    assert_eq!(
        ports,
        vec![
            ("http", Protocol::Tcp, 8080),
            ("dns", Protocol::Udp, 53),
            ("s", Protocol::Sctp, 9)
        ]
    );
    let ep = &got.endpoints[0];
    assert_eq!(got.endpoints.len(), 1);
    assert_eq!(ep.address, ip("fd00::2"));
    assert_eq!(ep.node(), Some("node-a"));
    assert_eq!(ep.zone.as_deref().map(String::as_str), Some("z1"));
    assert_eq!(ep.zone_hints(), [s("z1"), s("z2")]);
    assert_eq!(ep.node_hints(), [s("node-a")]);
}

#[test]
fn endpoint_slices_skipped() {
    let cases = [
        (
            "FQDN",
            format!("{SLICE_META}addressType: FQDN\nendpoints: [{{addresses: [example.com]}}]\n"),
        ),
        (
            "headless",
            "metadata:\n  name: a\n  labels: {kubernetes.io/service-name: web, service.kubernetes.io/headless: ''}\naddressType: IPv4\nendpoints: []\n".into(),
        ),
    ];
    for (what, body) in cases {
        assert_eq!(endpoint_slice(&slice(&body)), Ok(None), "{what}");
    }
}

#[test]
fn endpoint_slice_errors_name_the_field() {
    let cases: Vec<(&str, String, Reason)> = vec![
        (
            "no service-name label",
            "metadata: {name: web-abc, namespace: shop}\naddressType: IPv4\nendpoints: []\n".into(),
            missing("metadata.labels[kubernetes.io/service-name]"),
        ),
        (
            "unknown address type",
            format!("{SLICE_META}addressType: IPv7\nendpoints: []\n"),
            Reason::UnknownValue {
                field: s("addressType"),
                value: s("IPv7"),
                expected: "IPv4, IPv6 or FQDN",
            },
        ),
        (
            "bad address",
            format!(
                "{SLICE_META}addressType: IPv4\nendpoints: [{{addresses: [10.0.0.1]}}, {{addresses: [10.0.0.x]}}]\n"
            ),
            Reason::BadIp {
                field: s("endpoints[1].addresses[0]"),
                value: s("10.0.0.x"),
            },
        ),
        (
            "address of the other family",
            format!("{SLICE_META}addressType: IPv4\nendpoints: [{{addresses: ['fd00::1']}}]\n"),
            Reason::FamilyMismatch {
                field: s("endpoints[0].addresses[0]"),
                value: ip("fd00::1"),
                expected: FamilyName(Family::V4),
            },
        ),
        (
            "no address",
            format!("{SLICE_META}addressType: IPv4\nendpoints: [{{addresses: []}}]\n"),
            missing("endpoints[0].addresses"),
        ),
        (
            "port 0",
            format!("{SLICE_META}addressType: IPv4\nports: [{{port: 0}}]\nendpoints: []\n"),
            Reason::BadPort {
                field: s("ports[0].port"),
                value: 0,
            },
        ),
        (
            "port above 65535",
            format!("{SLICE_META}addressType: IPv4\nports: [{{port: 65536}}]\nendpoints: []\n"),
            Reason::BadPort {
                field: s("ports[0].port"),
                value: 65536,
            },
        ),
        (
            "unknown protocol",
            format!(
                "{SLICE_META}addressType: IPv4\nports: [{{port: 80, protocol: QUIC}}]\nendpoints: []\n"
            ),
            Reason::UnknownProtocol {
                field: s("ports[0].protocol"),
                value: s("QUIC"),
            },
        ),
        (
            "duplicate port names",
            format!(
                "{SLICE_META}addressType: IPv4\nports: [{{name: a, port: 80}}, {{name: a, port: 81}}]\nendpoints: []\n"
            ),
            Reason::DuplicatePortName {
                field: s("ports[1].name"),
                name: s("a"),
                first: s("ports[0].name"),
            },
        ),
    ];
    for (what, body, want) in cases {
        let err = endpoint_slice(&slice(&body)).expect_err(what);
        assert_eq!(*err.reason, want, "{what}");
        assert_eq!(err.object.kind, Kind::EndpointSlice);
    }
}

#[test]
fn node_addresses_cidrs_and_labels() {
    let got = node(&node_of(
        "metadata:
  name: node-a
  labels: {topology.kubernetes.io/zone: z1}
spec:
  podCIDR: 10.244.9.0/24
  podCIDRs: [10.244.1.0/24, 'fd00:244:1::/64']
status:
  addresses:
  - {type: Hostname, address: node-a}
  - {type: ExternalIP, address: 203.0.113.10}
  - {type: InternalIP, address: 192.168.1.10}
  - {type: InternalDNS, address: node-a.internal}
  - {type: InternalIP, address: 'fd00::10'}
  - {type: ExternalIP, address: 192.168.1.10}
",
    ))
    .unwrap();
    assert_eq!(
        got,
        Node {
            name: s("node-a"),
            addresses: vec![ip("192.168.1.10"), ip("fd00::10"), ip("203.0.113.10")],
            pod_cidrs: vec![net("10.244.1.0/24"), net("fd00:244:1::/64")],
            labels: [(s("topology.kubernetes.io/zone"), s("z1"))].into(),
        }
    );
}

/// Endpoint and node addresses stored before the API server parsed strictly read as
/// kube-proxy reads them (`ParseIPSloppy`): leading zeros are decimal, an IPv4-mapped
/// address is IPv4.
#[test]
fn endpoint_and_node_addresses_are_read_leniently() {
    let got = ok_slice(&format!(
        "{SLICE_META}addressType: IPv4\nports: [{{port: 8080}}]\nendpoints:\n- {{addresses: ['010.244.000.002']}}\n- {{addresses: ['::ffff:10.244.0.3']}}\n"
    ));
    let addresses: Vec<IpAddr> = got.endpoints.iter().map(|e| e.address).collect();
    assert_eq!(addresses, vec![ip("10.244.0.2"), ip("10.244.0.3")]);
    let got = node(&node_of(
        "metadata: {name: n}\nspec: {podCIDRs: ['010.244.001.000/024']}\nstatus:\n  addresses: [{type: InternalIP, address: 192.168.001.010}]\n",
    ))
    .unwrap();
    assert_eq!(got.addresses, vec![ip("192.168.1.10")]);
    assert_eq!(got.pod_cidrs, vec![net("10.244.1.0/24")]);
}

#[test]
fn node_defaults_and_fallbacks() {
    let bare = node(&node_of("metadata: {name: node-a}\n")).unwrap();
    assert_eq!(
        bare,
        Node {
            name: s("node-a"),
            ..Node::default()
        }
    );
    let legacy = node(&node_of(
        "metadata: {name: node-a}\nspec: {podCIDR: 10.244.1.0/24}\n",
    ))
    .unwrap();
    assert_eq!(legacy.pod_cidrs, vec![net("10.244.1.0/24")]);
}

#[test]
fn node_errors_name_the_field() {
    let cases: Vec<(&str, &str, Reason)> = vec![
        ("no name", "metadata: {}\n", missing("metadata.name")),
        (
            "bad address",
            "metadata: {name: n}\nstatus: {addresses: [{type: InternalIP, address: nope}]}\n",
            Reason::BadIp {
                field: s("status.addresses[0].address"),
                value: s("nope"),
            },
        ),
        (
            "bad podCIDRs",
            "metadata: {name: n}\nspec: {podCIDRs: [10.244.0.0/24, 10.244.1.0]}\n",
            Reason::BadCidr {
                field: s("spec.podCIDRs[1]"),
                value: s("10.244.1.0"),
            },
        ),
        (
            "bad podCIDR",
            "metadata: {name: n}\nspec: {podCIDR: x}\n",
            Reason::BadCidr {
                field: s("spec.podCIDR"),
                value: s("x"),
            },
        ),
    ];
    for (what, body, want) in cases {
        let err = node(&node_of(body)).expect_err(what);
        assert_eq!(*err.reason, want, "{what}");
        assert_eq!(err.object.namespace, None);
    }
}

#[test]
fn default_api_objects_never_panic() {
    // Everything optional left out: conversions answer, they do not panic.
    let _ = service(&core::Service::default());
    let _ = endpoint_slice(&discovery::EndpointSlice::default());
    assert!(node(&core::Node::default()).is_err());
    let empty_spec = core::Service {
        spec: Some(core::ServiceSpec::default()),
        ..svc("")
    };
    assert!(
        service(&empty_spec)
            .unwrap()
            .unwrap()
            .cluster_ips
            .is_empty()
    );
}

#[test]
fn scheduler_annotations_pick_a_services_own_scheduler() {
    let with = |annotation: &str| {
        let svc: core::Service = parse(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, annotations: {{{annotation}}}}}\n\
             spec: {{clusterIP: 10.0.0.1, ports: [{{port: 80}}]}}\n"
        ));
        service(&svc)
    };
    let ours = with("kube-proxy-ipvs.io/scheduler: sh").unwrap().unwrap();
    assert_eq!(ours.scheduler.as_deref(), Some("sh"));
    let kube_router = with("kube-router.io/service.scheduler: mh")
        .unwrap()
        .unwrap();
    assert_eq!(kube_router.scheduler.as_deref(), Some("mh"));
    // Any value is carried for the model to judge: the Service is never rejected for it.
    let typo = with("kube-proxy-ipvs.io/scheduler: ' R R '")
        .unwrap()
        .unwrap();
    assert_eq!(typo.scheduler.as_deref(), Some("R R"));
}

#[test]
fn oversized_names_and_labels_and_lists_are_rejected_as_the_api_would() {
    let long = "x".repeat(64);
    let svc_meta = |meta: &str| {
        let svc: core::Service = parse(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {meta}\nspec: {{clusterIP: 10.0.0.1, ports: [{{port: 80}}]}}\n"
        ));
        service(&svc).map(|_| ()).map_err(|e| *e.reason)
    };
    assert_eq!(
        svc_meta(&format!("{{name: web, labels: {{app: {long}}}}}")),
        Err(Reason::BadLabel {
            field: s("metadata.labels[app]"),
            what: "value",
            value: long.clone(),
            prefix: "",
        })
    );
    assert!(matches!(
        svc_meta(&format!("{{name: web, labels: {{{long}: a}}}}")),
        Err(Reason::BadLabel { what: "key", .. })
    ));
    assert!(matches!(
        svc_meta("{name: web, labels: {'Bad_Prefix/app': a}}"),
        Err(Reason::BadLabel { what: "key", .. })
    ));
    assert!(matches!(
        svc_meta("{name: web, labels: {app: \"a\\nb\"}}"),
        Err(Reason::BadLabel { what: "value", .. })
    ));
    // What the API accepts is accepted.
    assert_eq!(
        svc_meta("{name: web, labels: {app.kubernetes.io/name: Web_1.x, empty: ''}}"),
        Ok(())
    );

    let slice_named = |name: &str, labels: &str, endpoints: usize| {
        let eps: Vec<String> = (0..endpoints)
            .map(|i| format!("{{addresses: [10.1.{}.{}]}}", i / 250, i % 250 + 1))
            .collect();
        endpoint_slice(&slice(&format!(
            "metadata: {{name: '{name}', namespace: shop, labels: {{kubernetes.io/service-name: {labels}}}}}\n\
             addressType: IPv4\nendpoints: [{}]\n",
            eps.join(", ")
        )))
        .map(|s| s.map(|s| s.endpoints.len()))
        .map_err(|e| *e.reason)
    };
    assert_eq!(slice_named("web-abc", "web", 1000), Ok(Some(1000)));
    assert_eq!(
        slice_named("web-abc", "web", 1001),
        Err(Reason::TooMany {
            field: s("endpoints"),
            count: 1001,
            max: MAX_SLICE_ENDPOINTS
        })
    );
    let long_name = "a".repeat(254);
    assert!(matches!(
        slice_named(&long_name, "web", 1),
        Err(Reason::BadSubdomain { .. })
    ));
    assert!(matches!(
        slice_named("web.abc-1", &long, 1),
        Err(Reason::BadLabel { what: "value", .. })
    ));
}

#[test]
fn hostile_scheduler_annotations_are_carried_printable_and_short() {
    let long = "x".repeat(10_000);
    for value in [
        "\"rr\\n-A KUBE-SERVICES -j ACCEPT\"",
        "'rr;reboot'",
        "'$(reboot)'",
        "\"rr\\u0000\"",
        "'rr COMMIT'",
        "schedulerwaytoolong",
        "COMMIT",
        "RR",
        long.as_str(),
    ] {
        let svc: core::Service = parse(&format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, annotations: {{kube-proxy-ipvs.io/scheduler: {value}}}}}\n\
             spec: {{clusterIP: 10.0.0.1, ports: [{{port: 80}}]}}\n"
        ));
        let carried = service(&svc)
            .unwrap_or_else(|e| panic!("{value}: {e}"))
            .unwrap()
            .scheduler
            .unwrap();
        // One printable line, short: what reaches a log line or an event.
        assert!(!carried.chars().any(char::is_control), "{carried:?}");
        assert!(carried.chars().count() <= 35, "{carried:?}");
    }
}

#[test]
fn a_rejected_objects_name_is_one_printable_line() {
    assert!(matches!(
        printable("web-1"),
        std::borrow::Cow::Borrowed("web-1")
    ));
    assert_eq!(
        printable("web\n-A KUBE-SERVICES -j ACCEPT\u{1b}[31m"),
        "web\\n-A KUBE-SERVICES -j ACCEPT\\u{1b}[31m"
    );
    let long = printable(&"x".repeat(10_000)).into_owned();
    assert!(long.ends_with(&format!("...({} more characters)", 10_000 - PRINTABLE_MAX)));
    let svc: core::Service = parse(
        "apiVersion: v1\nkind: Service\nmetadata: {name: \"a\\nb\", namespace: \"c\\rd\"}\nspec: {}\n",
    );
    let err = service(&svc).unwrap_err();
    assert_eq!(err.object.to_string(), "Service c\\rd/a\\nb", "{err}");
    assert!(!err.to_string().contains(['\n', '\r']), "{err:?}");
}
