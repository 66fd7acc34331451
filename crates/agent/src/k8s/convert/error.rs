//! What a conversion answers when an object will not do: the object, and the reason.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{namespace_of, printable};
use crate::model::snapshot::cluster::{Family, Protocol};

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
    pub(super) fn of(kind: Kind, meta: &ObjectMeta) -> Self {
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

impl Reason {
    /// The variant's name in kebab-case (`bad-port`): a stable machine key for the log
    /// (`rejection=`) and for tests, unlike the text.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::Missing { .. } => "missing",
            Reason::BadName { .. } => "bad-name",
            Reason::BadSubdomain { .. } => "bad-subdomain",
            Reason::BadLabel { .. } => "bad-label",
            Reason::TooMany { .. } => "too-many",
            Reason::BadIp { .. } => "bad-ip",
            Reason::BadCidr { .. } => "bad-cidr",
            Reason::BadPort { .. } => "bad-port",
            Reason::UnknownProtocol { .. } => "unknown-protocol",
            Reason::UnknownValue { .. } => "unknown-value",
            Reason::FamilyMismatch { .. } => "family-mismatch",
            Reason::TooManyClusterIps { .. } => "too-many-cluster-ips",
            Reason::ClusterIpMismatch { .. } => "cluster-ip-mismatch",
            Reason::DuplicatePort { .. } => "duplicate-port",
            Reason::DuplicatePortName { .. } => "duplicate-port-name",
            Reason::NodePortNotAllowed { .. } => "node-port-not-allowed",
            Reason::BadTimeout { .. } => "bad-timeout",
        }
    }

    /// The path of the field at fault (`spec.ports[1].port`; for the later of two, the later).
    pub fn field(&self) -> &str {
        match self {
            Reason::Missing { field }
            | Reason::BadName { field, .. }
            | Reason::BadSubdomain { field, .. }
            | Reason::BadLabel { field, .. }
            | Reason::TooMany { field, .. }
            | Reason::BadIp { field, .. }
            | Reason::BadCidr { field, .. }
            | Reason::BadPort { field, .. }
            | Reason::UnknownProtocol { field, .. }
            | Reason::UnknownValue { field, .. }
            | Reason::FamilyMismatch { field, .. }
            | Reason::DuplicatePort { field, .. }
            | Reason::DuplicatePortName { field, .. }
            | Reason::NodePortNotAllowed { field, .. }
            | Reason::BadTimeout { field, .. } => field,
            Reason::TooManyClusterIps { .. } | Reason::ClusterIpMismatch { .. } => {
                "spec.clusterIPs"
            }
        }
    }
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
