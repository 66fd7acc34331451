//! Pure conversions from the k8s-openapi types to the model, with kube-proxy's semantics.
//!
//! The API types are `Option`-heavy and a manifest need not have passed API validation, so
//! every function here checks what the model relies on and answers with a [`ConvertError`]
//! that names the object and the field instead of guessing or panicking. Defaults are the
//! ones the API server applies (a missing `protocol` is TCP, a missing `ready` condition is
//! true, ...), so an object read from a file means what it would mean in a cluster.
//!
//! Objects kube-proxy does not look at are a distinct, non-error outcome: `Ok(None)`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use ipnet::IpNet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::cluster::{
    Endpoint, EndpointPort, EndpointSlice, Family, KUBE_ROUTER_SCHEDULER_ANNOTATION, Node,
    Protocol, SCHEDULER_ANNOTATION, Service, ServicePort, ServiceRef, ServiceType, TrafficPolicy,
};

/// Objects with this label belong to another proxy; kube-proxy's informers leave them out.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// Set on the Services and EndpointSlices of headless Services; kube-proxy leaves them out.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// Names the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The annotation the EndpointSlice controller sets to the time of the change it carries.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The namespace of an object whose manifest names none, as `kubectl apply` would use.
pub const DEFAULT_NAMESPACE: &str = "default";
/// The `sessionAffinityConfig.clientIP.timeoutSeconds` the API server fills in (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);
/// The largest session-affinity timeout the API accepts, in seconds (one day).
pub const MAX_AFFINITY_TIMEOUT_SECONDS: i32 = 86_400;

/// The most endpoints an EndpointSlice may hold (the API's validation limit).
pub const MAX_SLICE_ENDPOINTS: usize = 1000;
/// The most ports an EndpointSlice may list (the API's validation limit).
pub const MAX_SLICE_PORTS: usize = 100;

/// The kinds of object this module converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A v1 Service.
    Service,
    /// A discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice,
    /// A v1 Node.
    Node,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
        })
    }
}

/// Which object a conversion was about, as far as its metadata tells.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace (`None` for a Node).
    pub namespace: Option<String>,
    /// Its name, when it has one.
    pub name: Option<String>,
}

impl ObjectRef {
    fn of(kind: Kind, meta: &ObjectMeta) -> Self {
        let namespace = match kind {
            Kind::Node => None,
            Kind::Service | Kind::EndpointSlice => Some(namespace_of(meta).to_owned()),
        };
        Self {
            kind,
            namespace,
            name: meta.name.clone().filter(|n| !n.is_empty()),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The name and namespace of a rejected object can be anything: one log line each.
        write!(f, "{} ", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{}/", printable(ns))?;
        }
        f.write_str(&printable(self.name.as_deref().unwrap_or("<unnamed>")))
    }
}

/// An object the model cannot take, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {reason}")]
pub struct ConvertError {
    /// The object.
    pub object: ObjectRef,
    /// What is wrong with it (boxed to keep `Result`s small).
    pub reason: Box<Reason>,
}

/// What is wrong with an object. Each `field` is a path in the object, such as
/// `spec.ports[1].port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// A field the model needs is absent or empty.
    #[error("{field} is required")]
    Missing {
        /// The field.
        field: String,
    },
    /// A name that is not a DNS label (at most 63 lower-case letters, digits and `-`, starting
    /// with a letter or digit and ending with one), as the API requires of Service names and
    /// namespaces.
    #[error("{field}: {value:?} is not a DNS label (at most 63 of a-z, 0-9 and '-')")]
    BadName {
        /// The field.
        field: String,
        /// The name (cut to 100 characters).
        value: String,
    },
    /// A name that is not a DNS subdomain (at most 253 of a-z, 0-9, '-' and '.', each
    /// dot-separated part a DNS label), as the API requires of EndpointSlice names.
    #[error("{field}: {value:?} is not a DNS subdomain (at most 253 of a-z, 0-9, '-' and '.')")]
    BadSubdomain {
        /// The field.
        field: String,
        /// The name (cut to 100 characters).
        value: String,
    },
    /// A label key or value the API would refuse.
    #[error(
        "{field}: {value:?} is not a valid label {what} (at most 63 of A-Z, a-z, 0-9, '-', '_' \
         and '.', starting and ending with a letter or digit{prefix})"
    )]
    BadLabel {
        /// The field.
        field: String,
        /// `key` or `value`.
        what: &'static str,
        /// The key or value (cut to 100 characters).
        value: String,
        /// For a key: the note on its optional prefix.
        prefix: &'static str,
    },
    /// A list longer than the API allows.
    #[error("{field}: {count} entries, but at most {max} are allowed")]
    TooMany {
        /// The field.
        field: String,
        /// How many there are.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Not an IP address.
    #[error("{field}: {value:?} is not an IP address")]
    BadIp {
        /// The field.
        field: String,
        /// Its value.
        value: String,
    },
    /// Not a CIDR (`address/prefix`).
    #[error("{field}: {value:?} is not a CIDR")]
    BadCidr {
        /// The field.
        field: String,
        /// Its value.
        value: String,
    },
    /// A port (or node port) outside 1-65535.
    #[error("{field}: {value} is not a port number (1-65535)")]
    BadPort {
        /// The field.
        field: String,
        /// Its value.
        value: i32,
    },
    /// A protocol other than TCP, UDP and SCTP (the names are case-sensitive, as in the API).
    #[error("{field}: unknown protocol {value:?} (expected TCP, UDP or SCTP)")]
    UnknownProtocol {
        /// The field.
        field: String,
        /// Its value.
        value: String,
    },
    /// An enumerated field with a value the API does not define.
    #[error("{field}: unknown value {value:?} (expected {expected})")]
    UnknownValue {
        /// The field.
        field: String,
        /// Its value.
        value: String,
        /// The values the API defines.
        expected: &'static str,
    },
    /// An address of the wrong family: a second cluster IP of the first one's family, a
    /// cluster IP not of its `spec.ipFamilies` entry, an endpoint not of its slice's type.
    #[error("{field}: {value} is not an {expected} address")]
    FamilyMismatch {
        /// The field.
        field: String,
        /// Its value.
        value: IpAddr,
        /// The family it should have.
        expected: FamilyName,
    },
    /// More than two cluster IPs.
    #[error("spec.clusterIPs: {count} addresses, but at most two (one per family) are allowed")]
    TooManyClusterIps {
        /// How many there are.
        count: usize,
    },
    /// `spec.clusterIPs[0]` and `spec.clusterIP` disagree.
    #[error("spec.clusterIPs[0] {cluster_ips:?} differs from spec.clusterIP {cluster_ip:?}")]
    ClusterIpMismatch {
        /// `spec.clusterIP`.
        cluster_ip: String,
        /// `spec.clusterIPs[0]`.
        cluster_ips: String,
    },
    /// Two ports (or node ports) with the same number and protocol.
    #[error("{field}: {port}/{protocol} is already used by {first}")]
    DuplicatePort {
        /// The later field.
        field: String,
        /// The port.
        port: u16,
        /// The protocol.
        protocol: Protocol,
        /// The earlier field.
        first: String,
    },
    /// Two ports with the same name (two unnamed ports included: endpoints match on names).
    #[error("{field}: name {name:?} is already used by {first}")]
    DuplicatePortName {
        /// The later field.
        field: String,
        /// The name.
        name: String,
        /// The earlier field.
        first: String,
    },
    /// A node port on a Service whose type has none.
    #[error("{field}: a node port is not allowed when spec.type is {service_type}")]
    NodePortNotAllowed {
        /// The field.
        field: String,
        /// The Service's type as written.
        service_type: &'static str,
    },
    /// A session-affinity timeout outside 1-86400 seconds.
    #[error("{field}: {value} is not a valid timeout (1-86400 seconds)")]
    BadTimeout {
        /// The field.
        field: String,
        /// Its value.
        value: i32,
    },
}

/// An IP family as the API spells it, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyName(pub Family);

impl fmt::Display for FamilyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// Checks a DNS label (RFC 1123): what the API allows for Service names and namespaces.
fn dns_label(field: &str, value: &str) -> Result<(), Reason> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Reason::BadName {
            field: field.to_string(),
            value: cut(value),
        })
    }
}

/// The most characters of a name [`printable`] shows.
pub const PRINTABLE_MAX: usize = 253;

/// A name or other string from an object, made safe for one log line: control characters
/// (newlines included) escaped as Rust does (`\n`, `\u{1b}`), and cut after
/// [`PRINTABLE_MAX`] characters with the count of the rest. Names the API accepts come back
/// unchanged.
pub fn printable(value: &str) -> Cow<'_, str> {
    let long = value.chars().count() > PRINTABLE_MAX;
    if !long && !value.chars().any(char::is_control) {
        return Cow::Borrowed(value);
    }
    let mut out = String::new();
    for c in value.chars().take(PRINTABLE_MAX) {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if long {
        let rest = value.chars().count() - PRINTABLE_MAX;
        out.push_str(&format!("...({rest} more characters)"));
    }
    Cow::Owned(out)
}

fn cut(value: &str) -> String {
    value.chars().take(100).collect()
}

/// Checks a DNS subdomain (RFC 1123): what the API allows for most object names.
fn dns_subdomain(field: &str, value: &str) -> Result<(), Reason> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|part| dns_label(field, part).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Reason::BadSubdomain {
            field: field.to_string(),
            value: cut(value),
        })
    }
}

/// A label value, or the name part of a label key: at most 63 characters of alphanumerics,
/// `-`, `_` and `.`, beginning and ending with an alphanumeric.
fn label_name_ok(value: &str) -> bool {
    let alnum = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && alnum(value.bytes().next())
        && alnum(value.bytes().last())
}

/// Checks an object's labels as the API does: each key an optional DNS-subdomain prefix and
/// `/` and a name, each value empty or a name.
fn labels(meta: &ObjectMeta) -> Result<(), Reason> {
    for (key, value) in meta.labels.iter().flatten() {
        let (prefix, name) = match key.rsplit_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, key.as_str()),
        };
        let prefix_ok = prefix.is_none_or(|p| dns_subdomain("", p).is_ok());
        if !prefix_ok || !label_name_ok(name) {
            return Err(Reason::BadLabel {
                field: "metadata.labels".into(),
                what: "key",
                value: cut(key),
                prefix: "; an optional DNS-subdomain prefix and '/' before",
            });
        }
        if !value.is_empty() && !label_name_ok(value) {
            return Err(Reason::BadLabel {
                field: format!("metadata.labels[{}]", cut(key)),
                what: "value",
                value: cut(value),
                prefix: "",
            });
        }
    }
    Ok(())
}

fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(DEFAULT_NAMESPACE)
}

fn has_label(meta: &ObjectMeta, key: &str) -> bool {
    meta.labels.as_ref().is_some_and(|l| l.contains_key(key))
}

/// kube-proxy's Service informer selects `!service-proxy-name`.
fn service_ignored_by_kube_proxy(meta: &ObjectMeta) -> bool {
    has_label(meta, SERVICE_PROXY_NAME_LABEL)
}

/// kube-proxy's EndpointSlice informer selects `!headless`.
fn slice_ignored_by_kube_proxy(meta: &ObjectMeta) -> bool {
    has_label(meta, HEADLESS_LABEL)
}

fn missing(field: impl Into<String>) -> Reason {
    Reason::Missing {
        field: field.into(),
    }
}

fn parse_ip(field: impl FnOnce() -> String, value: &str) -> Result<IpAddr, Reason> {
    value.parse().map_err(|_| Reason::BadIp {
        field: field(),
        value: value.to_owned(),
    })
}

fn parse_cidr(field: impl FnOnce() -> String, value: &str) -> Result<IpNet, Reason> {
    value.parse().map_err(|_| Reason::BadCidr {
        field: field(),
        value: value.to_owned(),
    })
}

fn parse_port(field: impl FnOnce() -> String, value: i32) -> Result<u16, Reason> {
    match u16::try_from(value) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(Reason::BadPort {
            field: field(),
            value,
        }),
    }
}

fn parse_protocol(field: impl FnOnce() -> String, value: Option<&str>) -> Result<Protocol, Reason> {
    match value {
        None | Some("TCP") => Ok(Protocol::Tcp),
        Some("UDP") => Ok(Protocol::Udp),
        Some("SCTP") => Ok(Protocol::Sctp),
        Some(other) => Err(Reason::UnknownProtocol {
            field: field(),
            value: other.to_owned(),
        }),
    }
}

fn parse_policy(field: &str, value: Option<&str>) -> Result<TrafficPolicy, Reason> {
    match value {
        None | Some("") | Some("Cluster") => Ok(TrafficPolicy::Cluster),
        Some("Local") => Ok(TrafficPolicy::Local),
        Some(other) => Err(Reason::UnknownValue {
            field: field.to_owned(),
            value: other.to_owned(),
            expected: "Cluster or Local",
        }),
    }
}

fn parse_family(field: impl FnOnce() -> String, value: &str) -> Result<Family, Reason> {
    match value {
        "IPv4" => Ok(Family::V4),
        "IPv6" => Ok(Family::V6),
        other => Err(Reason::UnknownValue {
            field: field(),
            value: other.to_owned(),
            expected: "IPv4 or IPv6",
        }),
    }
}

/// Converts a Service.
///
/// `Ok(None)` for a Service kube-proxy does not watch (labelled
/// [`SERVICE_PROXY_NAME_LABEL`]). A headless Service (`clusterIP:
/// None` or none at all) converts with empty `cluster_ips`, and an ExternalName Service with
/// nothing but its name and kind: the desired state gives neither anything. A missing
/// namespace is [`DEFAULT_NAMESPACE`].
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
    let meta = &svc.metadata;
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("metadata.name"))?;
    dns_label("metadata.name", name)?;
    dns_label("metadata.namespace", namespace_of(meta))?;
    labels(meta)?;
    let id = ServiceRef::new(namespace_of(meta), name);
    let spec = svc.spec.as_ref().ok_or_else(|| missing("spec"))?;

    let (kind, type_name) = match spec.type_.as_deref() {
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
    };
    if kind == ServiceType::ExternalName {
        // A DNS alias: kube-proxy skips it whatever else its spec says.
        return Ok(Service {
            id,
            kind,
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
        });
    }

    let cluster_ips = cluster_ips(spec)?;
    let ports = service_ports(spec.ports.as_deref().unwrap_or_default(), kind, type_name)?;

    let external_ips = spec
        .external_ips
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, ip)| parse_ip(|| format!("spec.externalIPs[{i}]"), ip))
        .collect::<Result<Vec<_>, _>>()?;

    let mut load_balancer_ips = Vec::new();
    if kind == ServiceType::LoadBalancer {
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
            let ip = parse_ip(|| format!("status.loadBalancer.ingress[{i}].ip"), ip)?;
            if !load_balancer_ips.contains(&ip) {
                load_balancer_ips.push(ip);
            }
        }
    }

    let session_affinity = match spec.session_affinity.as_deref() {
        None | Some("") | Some("None") => None,
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            match timeout {
                None => Some(DEFAULT_AFFINITY_TIMEOUT),
                Some(t @ 1..=MAX_AFFINITY_TIMEOUT_SECONDS) => {
                    Some(Duration::from_secs(u64::from(t.unsigned_abs())))
                }
                Some(t) => {
                    return Err(Reason::BadTimeout {
                        field: "spec.sessionAffinityConfig.clientIP.timeoutSeconds".into(),
                        value: t,
                    });
                }
            }
        }
        Some(other) => {
            return Err(Reason::UnknownValue {
                field: "spec.sessionAffinity".into(),
                value: other.to_owned(),
                expected: "None or ClientIP",
            });
        }
    };

    let external_traffic_policy = parse_policy(
        "spec.externalTrafficPolicy",
        spec.external_traffic_policy.as_deref(),
    )?;
    let internal_traffic_policy = parse_policy(
        "spec.internalTrafficPolicy",
        spec.internal_traffic_policy.as_deref(),
    )?;

    let health_check_node_port = match spec.health_check_node_port {
        None | Some(0) => None,
        Some(p) => Some(parse_port(|| "spec.healthCheckNodePort".into(), p)?),
    };

    // kube-proxy trims each range and takes only CIDRs (no bare addresses), as the API does.
    let load_balancer_source_ranges = spec
        .load_balancer_source_ranges
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| {
            parse_cidr(|| format!("spec.loadBalancerSourceRanges[{i}]"), r.trim())
                .map(|net| net.trunc())
        })
        .collect::<Result<Vec<_>, _>>()?;

    Ok(Service {
        id,
        kind,
        cluster_ips,
        ports,
        external_ips,
        load_balancer_ips,
        session_affinity,
        external_traffic_policy,
        internal_traffic_policy,
        health_check_node_port,
        load_balancer_source_ranges,
        scheduler: scheduler_annotation(svc),
    })
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

/// Converts an EndpointSlice.
///
/// `Ok(None)` for a slice kube-proxy does not watch (labelled [`HEADLESS_LABEL`]) and for an
/// `FQDN` slice. Condition defaults are the API's:
/// `ready` absent is true, `serving` absent is `ready`, `terminating` absent is false. A port
/// with no number is left out (it would mean "all ports", which kube-proxy does not
/// support); a port's name defaults to "" and its protocol to TCP. Each endpoint is its first
/// address, the one kube-proxy uses.
pub fn endpoint_slice(
    slice: &discovery::EndpointSlice,
) -> Result<Option<EndpointSlice>, ConvertError> {
    let object = ObjectRef::of(Kind::EndpointSlice, &slice.metadata);
    if slice_ignored_by_kube_proxy(&slice.metadata) {
        return Ok(None);
    }
    endpoint_slice_inner(slice).map_err(|reason| ConvertError {
        object,
        reason: Box::new(reason),
    })
}

fn endpoint_slice_inner(slice: &discovery::EndpointSlice) -> Result<Option<EndpointSlice>, Reason> {
    let meta = &slice.metadata;
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("metadata.name"))?;
    dns_subdomain("metadata.name", name)?;
    dns_label("metadata.namespace", namespace_of(meta))?;
    labels(meta)?;
    let service_name = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing(format!("metadata.labels[{SERVICE_NAME_LABEL}]")))?;
    let family = match slice.address_type.as_str() {
        "IPv4" => Family::V4,
        "IPv6" => Family::V6,
        "FQDN" => return Ok(None),
        // k8s-openapi reads a missing addressType as "".
        "" => return Err(missing("addressType")),
        other => {
            return Err(Reason::UnknownValue {
                field: "addressType".into(),
                value: other.to_owned(),
                expected: "IPv4, IPv6 or FQDN",
            });
        }
    };

    let port_count = slice.ports.as_ref().map_or(0, Vec::len);
    if port_count > MAX_SLICE_PORTS {
        return Err(Reason::TooMany {
            field: "ports".into(),
            count: port_count,
            max: MAX_SLICE_PORTS,
        });
    }
    if slice.endpoints.len() > MAX_SLICE_ENDPOINTS {
        return Err(Reason::TooMany {
            field: "endpoints".into(),
            count: slice.endpoints.len(),
            max: MAX_SLICE_ENDPOINTS,
        });
    }
    let mut ports: Vec<(usize, EndpointPort)> = Vec::new();
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        let Some(number) = p.port else {
            continue;
        };
        let port = parse_port(|| format!("ports[{i}].port"), number)?;
        let protocol = parse_protocol(|| format!("ports[{i}].protocol"), p.protocol.as_deref())?;
        let name = p.name.clone().unwrap_or_default();
        if let Some((j, _)) = ports.iter().find(|(_, q)| q.name == name) {
            return Err(Reason::DuplicatePortName {
                field: format!("ports[{i}].name"),
                name,
                first: format!("ports[{j}].name"),
            });
        }
        ports.push((
            i,
            EndpointPort {
                name,
                protocol,
                port,
            },
        ));
    }

    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for (i, ep) in slice.endpoints.iter().enumerate() {
        let address = ep
            .addresses
            .first()
            .ok_or_else(|| missing(format!("endpoints[{i}].addresses")))?;
        let field = || format!("endpoints[{i}].addresses[0]");
        let address = parse_ip(field, address)?;
        if Family::of(&address) != family {
            return Err(Reason::FamilyMismatch {
                field: field(),
                value: address,
                expected: FamilyName(family),
            });
        }
        let conditions = ep.conditions.as_ref();
        let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
        let serving = conditions.and_then(|c| c.serving).unwrap_or(ready);
        let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
        let hints = ep.hints.as_ref();
        endpoints.push(Endpoint {
            address,
            ready,
            serving,
            terminating,
            node_name: ep
                .node_name
                .as_deref()
                .filter(|n| !n.is_empty())
                .map(crate::model::cluster::intern),
            zone: ep
                .zone
                .as_deref()
                .filter(|z| !z.is_empty())
                .map(crate::model::cluster::intern),
            hints: hints
                .map(|h| crate::model::cluster::EndpointHints {
                    zones: h
                        .for_zones
                        .iter()
                        .flatten()
                        .map(|z| z.name.clone())
                        .collect(),
                    nodes: h
                        .for_nodes
                        .iter()
                        .flatten()
                        .map(|n| n.name.clone())
                        .collect(),
                })
                .filter(|h| !h.zones.is_empty() || !h.nodes.is_empty())
                .map(Box::new),
        });
    }

    Ok(Some(EndpointSlice {
        name: name.to_owned(),
        service: ServiceRef::new(namespace_of(meta), service_name.as_str()),
        family,
        ports: ports.into_iter().map(|(_, p)| p).collect(),
        endpoints,
        trigger_time: trigger_time(meta),
    }))
}

/// The slice's `endpoints.kubernetes.io/last-change-trigger-time` (RFC 3339). A malformed
/// one is ignored, as kube-proxy ignores it: it only feeds a metric.
fn trigger_time(meta: &ObjectMeta) -> Option<SystemTime> {
    let text = meta.annotations.as_ref()?.get(TRIGGER_TIME_ANNOTATION)?;
    text.trim()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

/// Converts a Node: its `InternalIP` addresses first, then its `ExternalIP` ones (other
/// address types are left out, duplicates kept once), `spec.podCIDRs` falling back to
/// `spec.podCIDR`, and its labels.
pub fn node(node: &core::Node) -> Result<Node, ConvertError> {
    let object = ObjectRef::of(Kind::Node, &node.metadata);
    node_inner(node).map_err(|reason| ConvertError {
        object,
        reason: Box::new(reason),
    })
}

fn node_inner(node: &core::Node) -> Result<Node, Reason> {
    let name = node
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("metadata.name"))?;

    let listed = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default();
    let mut addresses = Vec::new();
    for wanted in ["InternalIP", "ExternalIP"] {
        for (i, a) in listed.iter().enumerate() {
            if a.type_ != wanted {
                continue;
            }
            let ip = parse_ip(|| format!("status.addresses[{i}].address"), &a.address)?;
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
    }

    let spec = node.spec.as_ref();
    let pod_cidrs = match spec.and_then(|s| s.pod_cidrs.as_deref()) {
        Some(list) if !list.is_empty() => list
            .iter()
            .enumerate()
            .map(|(i, c)| parse_cidr(|| format!("spec.podCIDRs[{i}]"), c))
            .collect::<Result<Vec<_>, _>>()?,
        _ => match spec
            .and_then(|s| s.pod_cidr.as_deref())
            .filter(|c| !c.is_empty())
        {
            Some(c) => vec![parse_cidr(|| "spec.podCIDR".into(), c)?],
            None => Vec::new(),
        },
    };

    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    Ok(Node {
        name: name.to_owned(),
        addresses,
        pod_cidrs,
        labels,
    })
}

#[cfg(test)]
mod tests;
