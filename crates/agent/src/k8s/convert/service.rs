//! Services: their name, type, cluster IPs, ports, external and load-balancer addresses,
//! session affinity, traffic policies and the scheduler annotation.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{dns_label, has_label, labels, namespace_of, printable};
use super::parse::{
    missing, parse_cidr, parse_family, parse_ip, parse_policy, parse_port, parse_protocol,
};
use super::{ConvertError, FamilyName, Kind, ObjectRef, Reason};
use crate::model::snapshot::cluster::{
    Family, KUBE_ROUTER_SCHEDULER_ANNOTATION, SCHEDULER_ANNOTATION, Service, ServicePort,
    ServiceRef, ServiceType, TrafficPolicy,
};

/// Objects with this label belong to another proxy; kube-proxy's informers leave them out.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The `sessionAffinityConfig.clientIP.timeoutSeconds` the API server fills in (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);
/// The largest session-affinity timeout the API accepts, in seconds (one day).
pub const MAX_AFFINITY_TIMEOUT_SECONDS: i32 = 86_400;

/// kube-proxy's Service informer selects `!service-proxy-name`.
fn service_ignored_by_kube_proxy(meta: &ObjectMeta) -> bool {
    has_label(meta, SERVICE_PROXY_NAME_LABEL)
}

/// Converts a Service.
///
/// `Ok(None)` for a Service kube-proxy does not watch (labelled
/// [`SERVICE_PROXY_NAME_LABEL`]). A headless Service (`clusterIP:
/// None` or none at all) converts with empty `cluster_ips`, and an ExternalName Service with
/// nothing but its name and kind: the desired state gives neither anything. A missing
/// namespace is [`DEFAULT_NAMESPACE`](super::DEFAULT_NAMESPACE).
pub fn service(svc: &core::Service) -> Result<Option<Service>, ConvertError> {
    let object = ObjectRef::of(Kind::Service, &svc.metadata);
    if service_ignored_by_kube_proxy(&svc.metadata) {
        return Ok(None);
    }
    service_inner(svc).map(Some).map_err(|reason| ConvertError {
        object,
        reason: Box::new(reason),
    })
}

fn service_inner(svc: &core::Service) -> Result<Service, Reason> {
    let id = service_id(&svc.metadata)?;
    let spec = svc.spec.as_ref().ok_or_else(|| missing("spec"))?;
    let (kind, type_name) = service_type(spec.type_.as_deref())?;
    if kind == ServiceType::ExternalName {
        // A DNS alias: kube-proxy skips it whatever else its spec says.
        return Ok(external_name(id));
    }
    // Struct fields are evaluated as written: this order is the order the errors are found.
    Ok(Service {
        id,
        kind,
        cluster_ips: cluster_ips(spec)?,
        ports: service_ports(spec.ports.as_deref().unwrap_or_default(), kind, type_name)?,
        external_ips: external_ips(svc, spec),
        load_balancer_ips: load_balancer_ips(svc, kind),
        session_affinity: session_affinity(spec)?,
        external_traffic_policy: parse_policy(
            "spec.externalTrafficPolicy",
            spec.external_traffic_policy.as_deref(),
        )?,
        internal_traffic_policy: parse_policy(
            "spec.internalTrafficPolicy",
            spec.internal_traffic_policy.as_deref(),
        )?,
        health_check_node_port: health_check_node_port(spec)?,
        load_balancer_source_ranges: load_balancer_source_ranges(svc, spec),
        scheduler: scheduler_annotation(svc),
    })
}

/// The Service's namespace and name, after the API's checks of them and of its labels.
fn service_id(meta: &ObjectMeta) -> Result<ServiceRef, Reason> {
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("metadata.name"))?;
    dns_label("metadata.name", name)?;
    dns_label("metadata.namespace", namespace_of(meta))?;
    labels(meta)?;
    Ok(ServiceRef::new(namespace_of(meta), name))
}

/// `spec.type`, with its name as written for messages.
fn service_type(value: Option<&str>) -> Result<(ServiceType, &'static str), Reason> {
    Ok(match value {
        None | Some("") | Some("ClusterIP") => (ServiceType::ClusterIp, "ClusterIP"),
        Some("NodePort") => (ServiceType::NodePort, "NodePort"),
        Some("LoadBalancer") => (ServiceType::LoadBalancer, "LoadBalancer"),
        Some("ExternalName") => (ServiceType::ExternalName, "ExternalName"),
        Some(other) => {
            return Err(Reason::UnknownValue {
                field: "spec.type".into(),
                value: other.to_owned(),
                expected: "ClusterIP, NodePort, LoadBalancer or ExternalName",
            });
        }
    })
}

/// An ExternalName Service: its name and kind, nothing to serve.
fn external_name(id: ServiceRef) -> Service {
    Service {
        id,
        kind: ServiceType::ExternalName,
        cluster_ips: Vec::new(),
        ports: Vec::new(),
        external_ips: Vec::new(),
        load_balancer_ips: Vec::new(),
        session_affinity: None,
        external_traffic_policy: TrafficPolicy::Cluster,
        internal_traffic_policy: TrafficPolicy::Cluster,
        health_check_node_port: None,
        load_balancer_source_ranges: Vec::new(),
        scheduler: None,
    }
}

/// `spec.externalIPs`. An entry that is no address is skipped with a warning, not the
/// Service: the API server may not have validated it, and kube-proxy skips it too
/// (`MapIPsByIPFamily`).
fn external_ips(svc: &core::Service, spec: &core::ServiceSpec) -> Vec<IpAddr> {
    spec.external_ips
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, ip)| lenient(svc, parse_ip(|| format!("spec.externalIPs[{i}]"), ip)))
        .collect()
}

/// `parsed`, or `None` with a warning naming the Service, the field and the value (none for
/// an empty or blank value, which kube-proxy skips silently).
fn lenient<T>(svc: &core::Service, parsed: Result<T, Reason>) -> Option<T> {
    match parsed {
        Ok(v) => Some(v),
        Err(Reason::BadIp { value, .. } | Reason::BadCidr { value, .. })
            if value.trim().is_empty() =>
        {
            None
        }
        Err(reason) => {
            tracing::warn!(
                service = %ObjectRef::of(Kind::Service, &svc.metadata),
                "skipping an entry that kube-proxy skips too: {reason}"
            );
            None
        }
    }
}

/// The addresses of `status.loadBalancer.ingress` the node captures, each once; none unless
/// the Service is a LoadBalancer.
fn load_balancer_ips(svc: &core::Service, kind: ServiceType) -> Vec<IpAddr> {
    let mut load_balancer_ips = Vec::new();
    if kind != ServiceType::LoadBalancer {
        return load_balancer_ips;
    }
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    for (i, ing) in ingress.iter().enumerate() {
        // A hostname-only entry has nothing to bind; in Proxy mode the load balancer
        // rewrites the destination itself, so the node must not capture the IP.
        let Some(ip) = ing.ip.as_deref().filter(|ip| !ip.is_empty()) else {
            continue;
        };
        if ing.ip_mode.as_deref() == Some("Proxy") {
            continue;
        }
        // kube-proxy reads no family from an address it cannot parse, so skips it.
        let Some(ip) = lenient(
            svc,
            parse_ip(|| format!("status.loadBalancer.ingress[{i}].ip"), ip),
        ) else {
            continue;
        };
        if !load_balancer_ips.contains(&ip) {
            load_balancer_ips.push(ip);
        }
    }
    load_balancer_ips
}

/// `spec.sessionAffinity`: the ClientIP timeout, `None` without affinity.
fn session_affinity(spec: &core::ServiceSpec) -> Result<Option<Duration>, Reason> {
    match spec.session_affinity.as_deref() {
        None | Some("") | Some("None") => Ok(None),
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            match timeout {
                None => Ok(Some(DEFAULT_AFFINITY_TIMEOUT)),
                Some(t @ 1..=MAX_AFFINITY_TIMEOUT_SECONDS) => {
                    Ok(Some(Duration::from_secs(u64::from(t.unsigned_abs()))))
                }
                Some(t) => Err(Reason::BadTimeout {
                    field: "spec.sessionAffinityConfig.clientIP.timeoutSeconds".into(),
                    value: t,
                }),
            }
        }
        Some(other) => Err(Reason::UnknownValue {
            field: "spec.sessionAffinity".into(),
            value: other.to_owned(),
            expected: "None or ClientIP",
        }),
    }
}

/// `spec.healthCheckNodePort`; 0 is none.
fn health_check_node_port(spec: &core::ServiceSpec) -> Result<Option<u16>, Reason> {
    match spec.health_check_node_port {
        None | Some(0) => Ok(None),
        Some(p) => parse_port(|| "spec.healthCheckNodePort".into(), p).map(Some),
    }
}

/// `spec.loadBalancerSourceRanges`, each trimmed (the API's validation allows padding) and
/// truncated to its network; a range that is no CIDR is skipped with a warning, as
/// kube-proxy's `MapCIDRsByIPFamily` skips it.
fn load_balancer_source_ranges(svc: &core::Service, spec: &core::ServiceSpec) -> Vec<IpNet> {
    spec.load_balancer_source_ranges
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, r)| {
            lenient(
                svc,
                parse_cidr(|| format!("spec.loadBalancerSourceRanges[{i}]"), r.trim()),
            )
        })
        .collect()
}

/// The Service's own scheduler, from our annotation or kube-router's, trimmed. Any value is
/// carried, so that a typo or a hostile value costs its Service only its own scheduler (the
/// model refuses a name that is no IPVS scheduler, and the Service gets the node's), never
/// the Service itself; made printable and cut short here, since it reaches log lines and
/// events.
fn scheduler_annotation(svc: &core::Service) -> Option<String> {
    let annotations = svc.metadata.annotations.as_ref()?;
    let value = [SCHEDULER_ANNOTATION, KUBE_ROUTER_SCHEDULER_ANNOTATION]
        .into_iter()
        .find_map(|k| annotations.get(k))?
        .trim();
    let shown = printable(value);
    if shown.chars().count() <= SCHEDULER_ANNOTATION_MAX {
        return Some(shown.into_owned());
    }
    let mut short: String = shown.chars().take(SCHEDULER_ANNOTATION_MAX).collect();
    short.push_str("...");
    Some(short)
}

/// The most characters of a scheduler annotation kept: every IPVS scheduler's name is far
/// shorter (the kernel allows 15).
const SCHEDULER_ANNOTATION_MAX: usize = 32;

/// `spec.clusterIPs`, falling back to `spec.clusterIP`; empty for a headless Service.
fn cluster_ips(spec: &core::ServiceSpec) -> Result<Vec<IpAddr>, Reason> {
    let single = spec.cluster_ip.as_deref().filter(|ip| !ip.is_empty());
    let raw: Vec<&str> = match spec.cluster_ips.as_deref() {
        Some(list) if !list.is_empty() => {
            if let Some(single) = single
                && single != list[0]
            {
                return Err(Reason::ClusterIpMismatch {
                    cluster_ip: single.to_owned(),
                    cluster_ips: list[0].clone(),
                });
            }
            list.iter().map(String::as_str).collect()
        }
        _ => single.into_iter().collect(),
    };
    match raw.first() {
        None | Some(&"") | Some(&"None") => return Ok(Vec::new()),
        Some(_) => {}
    }
    if raw.len() > 2 {
        return Err(Reason::TooManyClusterIps { count: raw.len() });
    }
    let ips = raw
        .iter()
        .enumerate()
        .map(|(i, ip)| parse_ip(|| format!("spec.clusterIPs[{i}]"), ip))
        .collect::<Result<Vec<_>, _>>()?;
    if let [first, second] = ips[..]
        && Family::of(&first) == Family::of(&second)
    {
        let expected = match Family::of(&first) {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        };
        return Err(Reason::FamilyMismatch {
            field: "spec.clusterIPs[1]".into(),
            value: second,
            expected: FamilyName(expected),
        });
    }
    for (i, family) in spec.ip_families.iter().flatten().enumerate() {
        let family = parse_family(|| format!("spec.ipFamilies[{i}]"), family)?;
        if let Some(ip) = ips.get(i)
            && Family::of(ip) != family
        {
            return Err(Reason::FamilyMismatch {
                field: format!("spec.clusterIPs[{i}]"),
                value: *ip,
                expected: FamilyName(family),
            });
        }
    }
    Ok(ips)
}

fn service_ports(
    ports: &[core::ServicePort],
    kind: ServiceType,
    type_name: &'static str,
) -> Result<Vec<ServicePort>, Reason> {
    let mut out: Vec<ServicePort> = Vec::with_capacity(ports.len());
    for (i, p) in ports.iter().enumerate() {
        let field = |sub: &str| format!("spec.ports[{i}].{sub}");
        let name = p.name.clone().unwrap_or_default();
        let protocol = parse_protocol(|| field("protocol"), p.protocol.as_deref())?;
        let port = parse_port(|| field("port"), p.port)?;
        // The API allocates a node port for 0 or none; a manifest may carry either.
        let node_port = match p.node_port {
            None | Some(0) => None,
            Some(n) => {
                if kind == ServiceType::ClusterIp {
                    return Err(Reason::NodePortNotAllowed {
                        field: field("nodePort"),
                        service_type: type_name,
                    });
                }
                Some(parse_port(|| field("nodePort"), n)?)
            }
        };
        for (j, q) in out.iter().enumerate() {
            if q.name == name {
                return Err(Reason::DuplicatePortName {
                    field: field("name"),
                    name,
                    first: format!("spec.ports[{j}].name"),
                });
            }
            if q.port == port && q.protocol == protocol {
                return Err(Reason::DuplicatePort {
                    field: field("port"),
                    port,
                    protocol,
                    first: format!("spec.ports[{j}].port"),
                });
            }
            if let Some(n) = node_port
                && q.node_port == Some(n)
                && q.protocol == protocol
            {
                return Err(Reason::DuplicatePort {
                    field: field("nodePort"),
                    port: n,
                    protocol,
                    first: format!("spec.ports[{j}].nodePort"),
                });
            }
        }
        out.push(ServicePort {
            name,
            protocol,
            port,
            node_port,
        });
    }
    Ok(out)
}
