//! kube-proxy's configuration file (`--config`): a `KubeProxyConfiguration` of
//! `kubeproxy.config.k8s.io/v1alpha1`, in YAML or JSON.
//!
//! The pipeline is the one kube-proxy runs, step by step, each a pure function:
//! 1. [`KubeProxyConfiguration::from_text`] decodes every field of the v1alpha1 type. Unknown
//!    fields are named with their path (`ipvs.fooBar`). kube-proxy first decodes strictly and,
//!    when that fails only on unknown or duplicate fields, decodes again leniently and logs a
//!    warning; [`Decoding::Lenient`] does the same, [`Decoding::Strict`] refuses the file.
//! 2. [`KubeProxyConfiguration::apply_defaults`]: v1alpha1's defaults and the Linux platform
//!    defaults (`mode`, `detectLocalMode`), with IPVS mode as the default mode.
//! 3. [`KubeProxyConfiguration::apply_flags`]: flags given on the command line override the
//!    file (see [`flags`] for why this differs from kube-proxy).
//! 4. [`KubeProxyConfiguration::validate`]: kube-proxy's validation, every error naming the
//!    field by its path in the file.
//! 5. [`KubeProxyConfiguration::classify`]: what kube-proxy-ipvs acts on ([`FIELDS`]): values
//!    it refuses are errors, values it accepts but ignores are warnings to log.
//!
//! [`load`] runs them all. [`KubeProxyConfiguration::to_yaml`] writes the effective
//! configuration back (`--write-config-to`), [`KubeProxyConfiguration::to_proxy_config`]
//! builds the model's [`ProxyConfig`].

pub mod duration;
pub mod flags;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize};

pub use duration::{GoDuration, TimeOrDuration};
pub use flags::FlagOverrides;

use crate::model::cluster::Family;
use crate::model::config::{LocalDetector, ProxyConfig, VipBinding};

/// The only `apiVersion` kube-proxy reads.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// The `kind`.
pub const KIND: &str = "KubeProxyConfiguration";
/// kube-proxy's healthz port (`ports.ProxyHealthzPort`).
pub const HEALTHZ_PORT: u16 = 10256;
/// kube-proxy's metrics port (`ports.ProxyStatusPort`).
pub const METRICS_PORT: u16 = 10249;
/// The feature gate that, set to false, turns IPVS mode off (Kubernetes 1.37 and later).
pub const IPVS_GATE: &str = "KubeProxyIPVS";

/// One field that is wrong, named by its path in the file (`ipvs.syncPeriod`) or its flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `ipvs.excludeCIDRs[1]`, or `--flag`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A list of field errors, shown one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid YAML/JSON `KubeProxyConfiguration` (bad syntax or a value of
    /// the wrong type).
    #[error("{}{source}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    Decode {
        /// The path of the field that failed, empty for the document itself.
        field: String,
        /// The decoder's message, with line and column.
        #[source]
        source: serde_yaml::Error,
    },
    /// Fields that the v1alpha1 type does not have ([`Decoding::Strict`]).
    #[error("strict decoding error: {}", .0.iter().map(|f| format!("unknown field {f:?}")).collect::<Vec<_>>().join(", "))]
    UnknownFields(Vec<String>),
    /// Values kube-proxy's validation refuses, or that kube-proxy-ipvs refuses.
    #[error("invalid configuration: {0}")]
    Invalid(FieldErrors),
    /// The configuration cannot be written.
    #[error("cannot encode the configuration: {0}")]
    Encode(#[source] serde_yaml::Error),
}

impl Error {
    fn invalid(errors: Vec<FieldError>) -> Self {
        Error::Invalid(FieldErrors(errors))
    }

    /// The field errors, when that is what this is.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            Error::Invalid(e) => &e.0,
            _ => &[],
        }
    }
}

/// How unknown fields are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Decoding {
    /// kube-proxy's behaviour for v1alpha1: unknown fields are ignored with a warning that names
    /// them (kube-proxy decodes strictly, then falls back to a lenient decoder).
    #[default]
    Lenient,
    /// Unknown fields are an error that names every one of them.
    Strict,
}

/// `clientConnection` (component-base `ClientConnectionConfiguration`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClientConnection {
    /// The `Accept` header; empty means `application/json`.
    #[serde(deserialize_with = "nullable")]
    pub accept_content_types: String,
    /// Client-side burst (`--kube-api-burst`, default 10, >= 0).
    #[serde(deserialize_with = "nullable")]
    pub burst: i32,
    /// The content type of requests (`--kube-api-content-type`, default protobuf).
    #[serde(deserialize_with = "nullable")]
    pub content_type: String,
    /// Path to a kubeconfig (`--kubeconfig`); empty means in-cluster.
    #[serde(deserialize_with = "nullable")]
    pub kubeconfig: String,
    /// Client-side queries per second (`--kube-api-qps`, default 5).
    #[serde(deserialize_with = "nullable")]
    pub qps: f32,
}

/// `conntrack`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Conntrack {
    /// NAT connections tracked per CPU core (default 32768; 0 leaves the limit alone).
    pub max_per_core: Option<i32>,
    /// The least `nf_conntrack_max` (default 131072).
    pub min: Option<i32>,
    /// `nf_conntrack_tcp_be_liberal`.
    #[serde(deserialize_with = "nullable")]
    pub tcp_be_liberal: bool,
    /// `nf_conntrack_tcp_timeout_close_wait` (default 1h).
    pub tcp_close_wait_timeout: Option<GoDuration>,
    /// `nf_conntrack_tcp_timeout_established` (default 24h).
    pub tcp_established_timeout: Option<GoDuration>,
    /// `nf_conntrack_udp_timeout_stream` (0 leaves it).
    #[serde(deserialize_with = "nullable")]
    pub udp_stream_timeout: GoDuration,
    /// `nf_conntrack_udp_timeout` (0 leaves it).
    #[serde(deserialize_with = "nullable")]
    pub udp_timeout: GoDuration,
}

/// `detectLocal`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DetectLocal {
    /// The pods' bridge (`detectLocalMode: BridgeInterface`).
    #[serde(deserialize_with = "nullable")]
    pub bridge_interface: String,
    /// The pods' interface name prefix (`detectLocalMode: InterfaceNamePrefix`).
    #[serde(deserialize_with = "nullable")]
    pub interface_name_prefix: String,
}

/// `iptables`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct IpTables {
    /// iptables mode only: NodePorts on 127.0.0.1 (default true).
    pub localhost_node_ports: Option<bool>,
    /// SNAT all traffic to Service cluster IPs (IPVS mode reads it too).
    #[serde(deserialize_with = "nullable")]
    pub masquerade_all: bool,
    /// The fwmark bit for SNAT, [0, 31] (default 14; IPVS mode reads it too).
    pub masquerade_bit: Option<i32>,
    /// iptables mode only (default 1s).
    #[serde(deserialize_with = "nullable")]
    pub min_sync_period: GoDuration,
    /// iptables mode only: SNAT to the node's InternalIP.
    #[serde(rename = "snatNodeInternalIP")]
    pub snat_node_internal_ip: Option<bool>,
    /// iptables mode only (default 30s).
    #[serde(deserialize_with = "nullable")]
    pub sync_period: GoDuration,
}

/// `ipvs`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Ipvs {
    /// CIDRs whose virtual servers are never deleted.
    #[serde(rename = "excludeCIDRs", deserialize_with = "nullable")]
    pub exclude_cidrs: Vec<String>,
    /// The least time between two syncs (default 0).
    #[serde(deserialize_with = "nullable")]
    pub min_sync_period: GoDuration,
    /// The scheduler (empty means `rr`).
    #[serde(deserialize_with = "nullable")]
    pub scheduler: String,
    /// `arp_ignore=1`, `arp_announce=2`.
    #[serde(rename = "strictARP", deserialize_with = "nullable")]
    pub strict_arp: bool,
    /// The full-resync period (default 30s); the health timeout is twice it.
    #[serde(deserialize_with = "nullable")]
    pub sync_period: GoDuration,
    /// IPVS TCP FIN timeout (0 leaves it).
    #[serde(deserialize_with = "nullable")]
    pub tcp_fin_timeout: GoDuration,
    /// IPVS TCP timeout (0 leaves it).
    #[serde(deserialize_with = "nullable")]
    pub tcp_timeout: GoDuration,
    /// IPVS UDP timeout (0 leaves it).
    #[serde(deserialize_with = "nullable")]
    pub udp_timeout: GoDuration,
    /// The agent's own field (not kube-proxy's, which warns about it and goes on): the
    /// longest a removed TCP real server drains at weight 0 (`--ipvs-graceful-termination-timeout`;
    /// unset: 15 minutes). Written back only when set, so the effective configuration of a
    /// kube-proxy file stays kube-proxy's.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub graceful_termination_timeout: Option<GoDuration>,
    /// The agent's own field: how the VIPs are bound on `kube-ipvs0`, `address` (kube-proxy's
    /// way, the default) or `route` (`--vip-binding`). Written back only when set.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub vip_binding: Option<String>,
}

/// `nftables` (nftables mode only).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NfTables {
    /// SNAT all traffic to cluster IPs.
    #[serde(deserialize_with = "nullable")]
    pub masquerade_all: bool,
    /// The fwmark bit (default 14).
    pub masquerade_bit: Option<i32>,
    /// Default 1s.
    #[serde(deserialize_with = "nullable")]
    pub min_sync_period: GoDuration,
    /// Default 30s.
    #[serde(deserialize_with = "nullable")]
    pub sync_period: GoDuration,
}

/// `winkernel` (Windows only).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Winkernel {
    /// HNS direct server return.
    #[serde(rename = "enableDSR", deserialize_with = "nullable")]
    pub enable_dsr: bool,
    /// Forward the Service VIP for the health check port.
    #[serde(deserialize_with = "nullable")]
    pub forward_health_check_vip: bool,
    /// The HNS network.
    #[serde(deserialize_with = "nullable")]
    pub network_name: String,
    /// The root HNS endpoint.
    #[serde(deserialize_with = "nullable")]
    pub root_hns_endpoint_name: String,
    /// The source VIP.
    #[serde(deserialize_with = "nullable")]
    pub source_vip: String,
}

/// `logging` (component-base `LoggingConfiguration`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Logging {
    /// How often buffered logs are flushed (default 5s); a duration or integer nanoseconds.
    #[serde(deserialize_with = "nullable")]
    pub flush_frequency: TimeOrDuration,
    /// `text` (default) or `json`.
    #[serde(deserialize_with = "nullable")]
    pub format: String,
    /// Per-format options.
    #[serde(deserialize_with = "nullable")]
    pub options: LoggingOptions,
    /// The verbosity, as `-v`.
    #[serde(deserialize_with = "nullable")]
    pub verbosity: u32,
    /// Per-file verbosity overrides.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub vmodule: Vec<VModule>,
}

/// `logging.options`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LoggingOptions {
    /// Options of the `json` format.
    #[serde(deserialize_with = "nullable")]
    pub json: OutputRouting,
    /// Options of the `text` format.
    #[serde(deserialize_with = "nullable")]
    pub text: OutputRouting,
}

/// `logging.options.{text,json}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OutputRouting {
    /// A resource quantity (`"0"`, `"64Ki"`); numbers are kept as their text.
    #[serde(deserialize_with = "quantity")]
    pub info_buffer_size: String,
    /// Info to stdout, errors to stderr.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_false")]
    pub split_stream: bool,
}

/// One `logging.vmodule` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct VModule {
    /// A file name pattern.
    #[serde(deserialize_with = "nullable")]
    pub file_pattern: String,
    /// Its verbosity.
    #[serde(deserialize_with = "nullable")]
    pub verbosity: u32,
}

/// `KubeProxyConfiguration` of `kubeproxy.config.k8s.io/v1alpha1`, every field of it.
///
/// Fields are declared in the order Go's encoder writes them (sorted), so that
/// [`Self::to_yaml`] reads like kube-proxy's `--write-config-to`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct KubeProxyConfiguration {
    /// Must be [`API_VERSION`].
    #[serde(deserialize_with = "nullable")]
    pub api_version: String,
    /// Overrides the node's primary IP; also picks the family of the default bind addresses.
    #[serde(deserialize_with = "nullable")]
    pub bind_address: String,
    /// A failed healthz or metrics bind is fatal.
    #[serde(deserialize_with = "nullable")]
    pub bind_address_hard_fail: bool,
    /// The API client.
    #[serde(deserialize_with = "nullable")]
    pub client_connection: ClientConnection,
    /// The pods' CIDRs, a comma-separated dual-stack pair at most.
    #[serde(rename = "clusterCIDR", deserialize_with = "nullable")]
    pub cluster_cidr: String,
    /// The informers' resync period (default 15m).
    #[serde(deserialize_with = "nullable")]
    pub config_sync_period: GoDuration,
    /// conntrack sysctls.
    #[serde(deserialize_with = "nullable")]
    pub conntrack: Conntrack,
    /// Settings of the local traffic detectors.
    #[serde(deserialize_with = "nullable")]
    pub detect_local: DetectLocal,
    /// `ClusterCIDR` (default), `NodeCIDR`, `BridgeInterface`, `InterfaceNamePrefix`.
    #[serde(deserialize_with = "nullable")]
    pub detect_local_mode: String,
    /// `/debug/pprof` on the metrics server.
    #[serde(deserialize_with = "nullable")]
    pub enable_profiling: bool,
    /// Feature gates.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub feature_gates: BTreeMap<String, bool>,
    /// `host:port` of `/healthz` and `/livez` (default `0.0.0.0:10256`).
    #[serde(deserialize_with = "nullable")]
    pub healthz_bind_address: String,
    /// The node's name, when not the host name.
    #[serde(deserialize_with = "nullable")]
    pub hostname_override: String,
    /// iptables settings (two of which IPVS mode reads).
    #[serde(deserialize_with = "nullable")]
    pub iptables: IpTables,
    /// IPVS settings.
    #[serde(deserialize_with = "nullable")]
    pub ipvs: Ipvs,
    /// Must be [`KIND`].
    #[serde(deserialize_with = "nullable")]
    pub kind: String,
    /// Logging.
    #[serde(deserialize_with = "nullable")]
    pub logging: Logging,
    /// `host:port` of `/metrics` (default `127.0.0.1:10249`).
    #[serde(deserialize_with = "nullable")]
    pub metrics_bind_address: String,
    /// The proxy mode; only `ipvs` (or empty) is served.
    #[serde(deserialize_with = "nullable")]
    pub mode: String,
    /// nftables settings (nftables mode only).
    #[serde(deserialize_with = "nullable")]
    pub nftables: NfTables,
    /// CIDRs (or `primary`) of the node addresses NodePorts answer on; empty means all.
    #[serde(deserialize_with = "nullable")]
    pub node_port_addresses: Vec<String>,
    /// The process's `oom_score_adj`, [-1000, 1000] (default -999).
    pub oom_score_adj: Option<i32>,
    /// Unused since the userspace proxy was removed.
    #[serde(deserialize_with = "nullable")]
    pub port_range: String,
    /// Show metrics hidden since this version (`<major>.<minor>`).
    #[serde(deserialize_with = "nullable")]
    pub show_hidden_metrics_for_version: String,
    /// Windows only.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "is_false")]
    pub windows_run_as_service: bool,
    /// Windows only.
    #[serde(deserialize_with = "nullable")]
    pub winkernel: Winkernel,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Go's JSON leaves a field at its zero value on `null` (a YAML key with no value).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A resource quantity, written as a string or a number.
fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a resource quantity such as \"0\" or \"64Ki\"")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<String, E> {
            Ok(String::new())
        }
    }
    d.deserialize_any(V)
}

/// A configuration ready to run, with the warnings to log.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The effective configuration: file, defaults, flags.
    pub config: KubeProxyConfiguration,
    /// Warnings to log once at start (unknown fields, ignored fields, flags overriding the
    /// file).
    pub warnings: Vec<String>,
}

/// Reads `file` (when given), applies the defaults and the explicit `flags`, validates and
/// classifies: everything `--config` needs. Without a file the flags alone are used, over the
/// defaults.
pub fn load(
    file: Option<&Path>,
    flags: &FlagOverrides,
    decoding: Decoding,
) -> Result<Loaded, Error> {
    let (mut config, mut warnings) = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.to_path_buf(),
                source,
            })?;
            KubeProxyConfiguration::from_text(&text, decoding)?
        }
        None => (KubeProxyConfiguration::empty(), Vec::new()),
    };
    if config.mode.is_empty() && file.is_some() && flags.get("proxy-mode").is_none() {
        warnings.push(
            "mode: empty (kube-proxy would run iptables mode); kube-proxy-ipvs runs ipvs mode"
                .to_string(),
        );
    }
    config.apply_defaults();
    warnings.extend(config.apply_flags(flags, file.is_some())?);
    config.normalize_bind_addresses();
    config.validate()?;
    warnings.extend(config.classify()?);
    Ok(Loaded { config, warnings })
}

impl KubeProxyConfiguration {
    /// An empty v1alpha1 object (what `apiVersion` and `kind` alone decode to).
    pub fn empty() -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            ..Self::default()
        }
    }

    /// The effective configuration when nothing is given: the empty object, defaulted.
    pub fn defaults() -> Self {
        let mut c = Self::empty();
        c.apply_defaults();
        c
    }

    /// Decodes YAML or JSON. Checks `apiVersion` and `kind`; unknown fields are an error
    /// ([`Decoding::Strict`]) or returned as warnings naming them ([`Decoding::Lenient`]).
    /// Nothing is defaulted yet.
    pub fn from_text(text: &str, decoding: Decoding) -> Result<(Self, Vec<String>), Error> {
        let mut unknown = Vec::new();
        let de = serde_yaml::Deserializer::from_str(text);
        // `nullable` fields go through an Option, which serde_ignored shows as a `?` segment.
        let mut note = |path: serde_ignored::Path<'_>| {
            unknown.push(path.to_string().replace(".?", "").replace("?.", ""))
        };
        let de = serde_ignored::Deserializer::new(de, &mut note);
        let config: Self = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            Error::Decode {
                field: if field == "." { String::new() } else { field },
                source: e.into_inner(),
            }
        })?;
        let mut errors = Vec::new();
        if config.api_version != API_VERSION {
            errors.push(FieldError::new(
                "apiVersion",
                format!(
                    "{:?} is not supported: must be {API_VERSION}",
                    config.api_version
                ),
            ));
        }
        if config.kind != KIND {
            errors.push(FieldError::new(
                "kind",
                format!("{:?} is not supported: must be {KIND}", config.kind),
            ));
        }
        if !errors.is_empty() {
            return Err(Error::invalid(errors));
        }
        match decoding {
            Decoding::Strict if !unknown.is_empty() => Err(Error::UnknownFields(unknown)),
            _ => Ok((
                config,
                unknown
                    .into_iter()
                    .map(|f| {
                        format!("unknown field {f:?} ignored (lenient decoding, as kube-proxy)")
                    })
                    .collect(),
            )),
        }
    }

    /// v1alpha1's defaulting (`SetDefaults_KubeProxyConfiguration`), component-base's
    /// recommended logging settings, and the platform defaults: `mode` becomes `ipvs` (not
    /// kube-proxy's `iptables`: this is an IPVS proxy), `detectLocalMode` `ClusterCIDR`, and
    /// `ipvs.scheduler` `rr` (kube-proxy leaves it empty and means `rr`).
    pub fn apply_defaults(&mut self) {
        if self.bind_address.is_empty() {
            self.bind_address = "0.0.0.0".into();
        }
        let v6 = matches!(self.bind_address.parse::<IpAddr>(), Ok(IpAddr::V6(_)));
        let (any, local) = if v6 {
            ("[::]", "[::1]")
        } else {
            ("0.0.0.0", "127.0.0.1")
        };
        if self.healthz_bind_address.is_empty() {
            self.healthz_bind_address = format!("{any}:{HEALTHZ_PORT}");
        }
        if self.metrics_bind_address.is_empty() {
            self.metrics_bind_address = format!("{local}:{METRICS_PORT}");
        }
        self.normalize_bind_addresses();
        self.oom_score_adj.get_or_insert(-999);
        default_duration(&mut self.iptables.sync_period, 30);
        default_duration(&mut self.iptables.min_sync_period, 1);
        self.iptables.masquerade_bit.get_or_insert(14);
        self.iptables.localhost_node_ports.get_or_insert(true);
        default_duration(&mut self.ipvs.sync_period, 30);
        default_duration(&mut self.nftables.sync_period, 30);
        default_duration(&mut self.nftables.min_sync_period, 1);
        self.nftables.masquerade_bit.get_or_insert(14);
        self.conntrack.max_per_core.get_or_insert(32 * 1024);
        self.conntrack.min.get_or_insert(128 * 1024);
        self.conntrack
            .tcp_established_timeout
            .get_or_insert(GoDuration::from_secs(24 * 3600));
        self.conntrack
            .tcp_close_wait_timeout
            .get_or_insert(GoDuration::from_secs(3600));
        default_duration(&mut self.config_sync_period, 15 * 60);
        if self.client_connection.content_type.is_empty() {
            self.client_connection.content_type = "application/vnd.kubernetes.protobuf".into();
        }
        if self.client_connection.qps == 0.0 {
            self.client_connection.qps = 5.0;
        }
        if self.client_connection.burst == 0 {
            self.client_connection.burst = 10;
        }
        if self.logging.format.is_empty() {
            self.logging.format = "text".into();
        }
        if self.logging.flush_frequency.0.is_zero() {
            self.logging.flush_frequency = TimeOrDuration(GoDuration::from_secs(5));
        }
        for o in [
            &mut self.logging.options.json,
            &mut self.logging.options.text,
        ] {
            if o.info_buffer_size.is_empty() {
                o.info_buffer_size = "0".into();
            }
        }
        if self.mode.is_empty() {
            self.mode = "ipvs".into();
        }
        if self.detect_local_mode.is_empty() {
            self.detect_local_mode = "ClusterCIDR".into();
        }
        if self.ipvs.scheduler.is_empty() {
            self.ipvs.scheduler = "rr".into();
        }
    }

    /// kube-proxy's `AppendPortIfNeeded`: a bind address given as a bare IP gets the default
    /// port.
    pub fn normalize_bind_addresses(&mut self) {
        append_port(&mut self.healthz_bind_address, HEALTHZ_PORT);
        append_port(&mut self.metrics_bind_address, METRICS_PORT);
    }

    /// kube-proxy's validation (`pkg/proxy/apis/config/validation`), for a defaulted
    /// configuration. Every error is reported, each naming its field.
    pub fn validate(&self) -> Result<(), Error> {
        let mut errs = Vec::new();
        let mut push = |field: &str, message: String| errs.push(FieldError::new(field, message));

        if self.api_version != API_VERSION {
            push("apiVersion", format!("must be {API_VERSION}"));
        }
        if self.kind != KIND {
            push("kind", format!("must be {KIND}"));
        }
        // IPTables is validated in every mode, as kube-proxy does.
        if let Some(bit) = self.iptables.masquerade_bit
            && !(0..=31).contains(&bit)
        {
            push(
                "iptables.masqueradeBit",
                format!("{bit}: must be within the range [0, 31]"),
            );
        }
        check_periods(
            "iptables",
            self.iptables.sync_period,
            self.iptables.min_sync_period,
            &mut push,
        );
        if self.mode == "ipvs" {
            check_periods(
                "ipvs",
                self.ipvs.sync_period,
                self.ipvs.min_sync_period,
                &mut push,
            );
            for (name, d) in [
                ("ipvs.tcpTimeout", self.ipvs.tcp_timeout),
                ("ipvs.tcpFinTimeout", self.ipvs.tcp_fin_timeout),
                ("ipvs.udpTimeout", self.ipvs.udp_timeout),
            ] {
                non_negative(name, d, &mut push);
            }
            for (i, c) in self.ipvs.exclude_cidrs.iter().enumerate() {
                if let Err(m) = parse_cidr(c) {
                    push(&format!("ipvs.excludeCIDRs[{i}]"), m);
                }
            }
            let s = &self.ipvs.scheduler;
            if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                push(
                    "ipvs.scheduler",
                    format!("{s:?} is not an IPVS scheduler name"),
                );
            }
        }
        if self.mode == "nftables" {
            if let Some(bit) = self.nftables.masquerade_bit
                && !(0..=31).contains(&bit)
            {
                push(
                    "nftables.masqueradeBit",
                    format!("{bit}: must be within the range [0, 31]"),
                );
            }
            check_periods(
                "nftables",
                self.nftables.sync_period,
                self.nftables.min_sync_period,
                &mut push,
            );
        }
        let ct = &self.conntrack;
        for (name, v) in [
            ("conntrack.maxPerCore", ct.max_per_core),
            ("conntrack.min", ct.min),
        ] {
            if let Some(v) = v
                && v < 0
            {
                push(name, format!("{v}: must be greater than or equal to 0"));
            }
        }
        for (name, d) in [
            (
                "conntrack.tcpEstablishedTimeout",
                ct.tcp_established_timeout.unwrap_or_default(),
            ),
            (
                "conntrack.tcpCloseWaitTimeout",
                ct.tcp_close_wait_timeout.unwrap_or_default(),
            ),
            ("conntrack.udpTimeout", ct.udp_timeout),
            ("conntrack.udpStreamTimeout", ct.udp_stream_timeout),
        ] {
            non_negative(name, d, &mut push);
        }
        if !matches!(self.mode.as_str(), "" | "iptables" | "ipvs" | "nftables") {
            push(
                "mode",
                format!(
                    "{:?}: must be iptables, ipvs, nftables or blank (blank means the best-available proxy)",
                    self.mode
                ),
            );
        }
        if self.client_connection.burst < 0 {
            push(
                "clientConnection.burst",
                format!(
                    "{}: must be greater than or equal to 0",
                    self.client_connection.burst
                ),
            );
        }
        if let Some(v) = self.oom_score_adj
            && !(-1000..=1000).contains(&v)
        {
            push(
                "oomScoreAdj",
                format!("{v}: must be within the range [-1000, 1000]"),
            );
        }
        if self.config_sync_period.as_nanos() <= 0 {
            push(
                "configSyncPeriod",
                format!("{}: must be greater than 0", self.config_sync_period),
            );
        }
        if self.bind_address.parse::<IpAddr>().is_err() {
            push(
                "bindAddress",
                format!("{:?}: must be a valid IP address", self.bind_address),
            );
        }
        if !self.healthz_bind_address.is_empty()
            && let Err(m) = parse_host_port(&self.healthz_bind_address)
        {
            push("healthzBindAddress", m);
        }
        if !self.metrics_bind_address.is_empty()
            && let Err(m) = parse_host_port(&self.metrics_bind_address)
        {
            push("metricsBindAddress", m);
        }
        if let Err(m) = self.cluster_cidrs() {
            push("clusterCIDR", m);
        }
        if let Err(m) = parse_port_range(&self.port_range) {
            push("portRange", m);
        }
        let npa = &self.node_port_addresses;
        for (i, a) in npa.iter().enumerate() {
            match a.as_str() {
                "primary" if npa.len() > 1 => push(
                    &format!("nodePortAddresses[{i}]"),
                    "\"primary\" cannot be combined with CIDRs".into(),
                ),
                "primary" | "all" | "localhost" => {}
                cidr => {
                    if let Err(m) = parse_cidr(cidr) {
                        push(
                            &format!("nodePortAddresses[{i}]"),
                            format!("{m} (nor primary, all or localhost)"),
                        );
                    }
                }
            }
        }
        let v = &self.show_hidden_metrics_for_version;
        if !v.is_empty() {
            let ok = v
                .split_once('.')
                .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
            if !ok {
                push(
                    "showHiddenMetricsForVersion",
                    format!("{v:?}: must be <major>.<minor>, e.g. 1.33"),
                );
            }
        }
        match self.detect_local_mode.as_str() {
            "" | "ClusterCIDR" | "NodeCIDR" => {}
            "BridgeInterface" => {
                if self.detect_local.bridge_interface.is_empty() {
                    push(
                        "detectLocal.bridgeInterface",
                        "must not be empty when detectLocalMode is BridgeInterface".into(),
                    );
                }
            }
            "InterfaceNamePrefix" => {
                if self.detect_local.interface_name_prefix.is_empty() {
                    push(
                        "detectLocal.interfaceNamePrefix",
                        "must not be empty when detectLocalMode is InterfaceNamePrefix".into(),
                    );
                }
            }
            other => push(
                "detectLocalMode",
                format!(
                    "{other:?}: supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\""
                ),
            ),
        }
        if !self.hostname_override.is_empty() && self.hostname_override.trim().is_empty() {
            push("hostnameOverride", "must not be only white space".into());
        }
        if !matches!(self.logging.format.as_str(), "" | "text" | "json") {
            push(
                "logging.format",
                format!("{:?}: must be text or json", self.logging.format),
            );
        }
        if self.logging.flush_frequency.0.is_negative() {
            push(
                "logging.flushFrequency",
                "must be greater than or equal to 0".into(),
            );
        }
        for (i, m) in self.logging.vmodule.iter().enumerate() {
            if m.file_pattern.is_empty() || m.file_pattern.contains([',', '=']) {
                push(
                    &format!("logging.vmodule[{i}].filePattern"),
                    format!(
                        "{:?}: must be a non-empty pattern without , or =",
                        m.file_pattern
                    ),
                );
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(errs))
        }
    }

    /// Splits `clusterCIDR`: at most two CIDRs, and two only as a dual-stack pair.
    pub fn cluster_cidrs(&self) -> Result<Vec<IpNet>, String> {
        if self.cluster_cidr.trim().is_empty() {
            return Ok(Vec::new());
        }
        let cidrs = self
            .cluster_cidr
            .split(',')
            .map(|c| parse_cidr(c.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        match cidrs.as_slice() {
            [_] => Ok(cidrs),
            [a, b] if Family::of(&a.addr()) != Family::of(&b.addr()) => Ok(cidrs),
            [_, _] => Err(format!(
                "{:?}: must be a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
                self.cluster_cidr
            )),
            _ => Err(format!(
                "{:?}: only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
                self.cluster_cidr
            )),
        }
    }

    /// What kube-proxy-ipvs does with each field ([`FIELDS`]): an error for values it refuses,
    /// and a warning for every field it accepts but does not act on that differs from its
    /// default.
    pub fn classify(&self) -> Result<Vec<String>, Error> {
        let mut refused = Vec::new();
        if self.mode != "ipvs" && !self.mode.is_empty() {
            refused.push(FieldError::new(
                "mode",
                format!(
                    "{:?} is not served by kube-proxy-ipvs, which implements only \"ipvs\"",
                    self.mode
                ),
            ));
        }
        if self.feature_gates.get(IPVS_GATE) == Some(&false) {
            refused.push(FieldError::new(
                format!("featureGates.{IPVS_GATE}"),
                "false turns IPVS mode off; kube-proxy would refuse to start in ipvs mode",
            ));
        }
        if !refused.is_empty() {
            return Err(Error::invalid(refused));
        }
        let mut warnings = Vec::new();
        let here = serde_json::to_value(self).unwrap_or_default();
        let defaults = serde_json::to_value(Self::defaults()).unwrap_or_default();
        for field in FIELDS.iter().filter(|f| f.support == Support::Ignored) {
            let value = lookup(&here, field.path);
            if value != lookup(&defaults, field.path) {
                let shown = value.map_or_else(|| "null".into(), |v| v.to_string());
                warnings.push(format!(
                    "{} = {shown} is accepted but not acted on by kube-proxy-ipvs: {}",
                    field.path, field.note
                ));
            }
        }
        for (gate, on) in &self.feature_gates {
            if gate != IPVS_GATE {
                warnings.push(format!(
                    "featureGates.{gate} = {on} is accepted but not acted on by kube-proxy-ipvs"
                ));
            }
        }
        if self.node_port_addresses.iter().any(|a| a == "localhost") {
            warnings.push(
                "nodePortAddresses: \"localhost\" is ignored: IPVS mode never serves NodePorts on loopback"
                    .into(),
            );
        }
        Ok(warnings)
    }

    /// The YAML kube-proxy's `--write-config-to` writes: every field, sorted, durations in
    /// Go's form.
    pub fn to_yaml(&self) -> Result<String, Error> {
        serde_yaml::to_string(self).map_err(Error::Encode)
    }

    /// Writes [`Self::to_yaml`] to `path`.
    pub fn write_to(&self, path: &Path) -> Result<(), Error> {
        let text = self.to_yaml()?;
        std::fs::write(path, text).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The node name from `hostnameOverride`, trimmed and lower-cased as kube-proxy does;
    /// `None` means "use the host name".
    pub fn node_name(&self) -> Option<String> {
        let name = self.hostname_override.trim();
        (!name.is_empty()).then(|| name.to_lowercase())
    }

    /// `ipvs.syncPeriod`: the full resync period.
    pub fn sync_period(&self) -> Duration {
        self.ipvs.sync_period.to_std()
    }

    /// `ipvs.minSyncPeriod`: the least time between two syncs.
    pub fn min_sync_period(&self) -> Duration {
        self.ipvs.min_sync_period.to_std()
    }

    /// The proxy health timeout: 2 × `ipvs.syncPeriod`, as kube-proxy.
    pub fn health_timeout(&self) -> Duration {
        self.sync_period() * 2
    }

    /// Where `/healthz` and `/livez` listen; `None` disables them.
    pub fn healthz_address(&self) -> Option<SocketAddr> {
        parse_host_port(&self.healthz_bind_address).ok()
    }

    /// Where `/metrics` listens; `None` disables it.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        parse_host_port(&self.metrics_bind_address).ok()
    }

    /// The IPVS connection timeouts (TCP, TCP FIN, UDP) to set; zero leaves one as it is.
    pub fn ipvs_timeouts(&self) -> (Duration, Duration, Duration) {
        (
            self.ipvs.tcp_timeout.to_std(),
            self.ipvs.tcp_fin_timeout.to_std(),
            self.ipvs.udp_timeout.to_std(),
        )
    }

    /// The sysctls kube-proxy writes from `conntrack` on a node with `cpus` CPUs, as
    /// `(key below /proc/sys, value)`. `nf_conntrack_max` is `maxPerCore × cpus`, at least
    /// `min`, and only when `maxPerCore > 0` (kube-proxy also raises the module's
    /// `hashsize` to a quarter of it); a zero timeout leaves its sysctl alone.
    pub fn conntrack_sysctls(&self, cpus: u32) -> Vec<(String, String)> {
        let ct = &self.conntrack;
        let mut out = Vec::new();
        let per_core = i64::from(ct.max_per_core.unwrap_or(0));
        if per_core > 0 {
            let max = (per_core * i64::from(cpus)).max(i64::from(ct.min.unwrap_or(0)));
            out.push(("net/netfilter/nf_conntrack_max".into(), max.to_string()));
        }
        let secs = |d: Option<GoDuration>| d.map_or(0, |d| d.as_nanos() / 1_000_000_000);
        for (key, d) in [
            (
                "net/netfilter/nf_conntrack_tcp_timeout_established",
                ct.tcp_established_timeout,
            ),
            (
                "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
                ct.tcp_close_wait_timeout,
            ),
            (
                "net/netfilter/nf_conntrack_udp_timeout",
                Some(ct.udp_timeout),
            ),
            (
                "net/netfilter/nf_conntrack_udp_timeout_stream",
                Some(ct.udp_stream_timeout),
            ),
        ] {
            let s = secs(d);
            if s > 0 {
                out.push((key.into(), s.to_string()));
            }
        }
        if ct.tcp_be_liberal {
            out.push((
                "net/netfilter/nf_conntrack_tcp_be_liberal".into(),
                "1".into(),
            ));
        }
        out
    }

    /// The model's configuration for node `node_name` (see [`Self::node_name`]). Call on a
    /// validated configuration.
    pub fn to_proxy_config(&self, node_name: &str) -> Result<ProxyConfig, Error> {
        let mut errs = Vec::new();
        let cluster_cidrs = self.cluster_cidrs().unwrap_or_else(|m| {
            errs.push(FieldError::new("clusterCIDR", m));
            Vec::new()
        });
        let cidr_list = |path: &str, list: &[String], errs: &mut Vec<FieldError>| {
            let mut out = Vec::new();
            for (i, c) in list.iter().enumerate() {
                match c.as_str() {
                    // `primary` is expanded from the Node's addresses by the sync; loopback
                    // is never served in IPVS mode.
                    "primary" | "localhost" => {}
                    "all" => out.extend(
                        ["0.0.0.0/0", "::/0"].map(|n| n.parse::<IpNet>().unwrap_or_default()),
                    ),
                    _ => match parse_cidr(c) {
                        Ok(n) => out.push(n),
                        Err(m) => errs.push(FieldError::new(format!("{path}[{i}]"), m)),
                    },
                }
            }
            out
        };
        let nodeport_addresses =
            cidr_list("nodePortAddresses", &self.node_port_addresses, &mut errs);
        let exclude_cidrs = cidr_list("ipvs.excludeCIDRs", &self.ipvs.exclude_cidrs, &mut errs);
        let local_detector = match self.detect_local_mode.as_str() {
            "NodeCIDR" => LocalDetector::NodeCidr(Vec::new()),
            "BridgeInterface" => {
                LocalDetector::BridgeInterface(self.detect_local.bridge_interface.clone())
            }
            "InterfaceNamePrefix" => {
                LocalDetector::InterfaceNamePrefix(self.detect_local.interface_name_prefix.clone())
            }
            _ if cluster_cidrs.is_empty() => LocalDetector::None,
            _ => LocalDetector::ClusterCidr(cluster_cidrs.clone()),
        };
        let masquerade_bit = self.iptables.masquerade_bit.unwrap_or(14);
        let masquerade_bit = u8::try_from(masquerade_bit)
            .ok()
            .filter(|b| *b <= 31)
            .unwrap_or_else(|| {
                errs.push(FieldError::new(
                    "iptables.masqueradeBit",
                    "must be within the range [0, 31]",
                ));
                14
            });
        if !errs.is_empty() {
            return Err(Error::invalid(errs));
        }
        let graceful_termination_timeout = match self.ipvs.graceful_termination_timeout {
            None => crate::model::config::DEFAULT_GRACEFUL_TERMINATION_TIMEOUT,
            Some(d) if d.is_negative() => {
                return Err(Error::invalid(vec![FieldError::new(
                    "ipvs.gracefulTerminationTimeout",
                    format!("{d} must not be negative"),
                )]));
            }
            Some(d) => d.to_std(),
        };
        let vip_binding = match &self.ipvs.vip_binding {
            None => VipBinding::default(),
            Some(v) => v
                .parse()
                .map_err(|e: crate::model::config::BadVipBinding| {
                    Error::invalid(vec![FieldError::new("ipvs.vipBinding", e.to_string())])
                })?,
        };
        Ok(ProxyConfig {
            node_name: node_name.to_string(),
            scheduler: if self.ipvs.scheduler.is_empty() {
                "rr".into()
            } else {
                self.ipvs.scheduler.clone()
            },
            masquerade_all: self.iptables.masquerade_all,
            masquerade_bit,
            local_detector,
            nodeport_addresses,
            nodeport_primary: self.node_port_addresses.iter().any(|a| a == "primary"),
            exclude_cidrs,
            random_fully: true,
            strict_arp: self.ipvs.strict_arp,
            // Both, as kube-proxy on a host that supports both: no flag turns a family off.
            // The kernel edge keeps those the host can serve (dataplane::families).
            families: vec![Family::V4, Family::V6],
            // Not configurable yet: the defaults.
            graceful_termination_timeout,
            prefer_same_node: true,
            // A fact of the host, read at start.
            kernel_version: None,
            vip_binding,
        })
    }
}

fn default_duration(d: &mut GoDuration, secs: i64) {
    if d.is_zero() {
        *d = GoDuration::from_secs(secs);
    }
}

fn append_port(addr: &mut String, port: u16) {
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => *addr = format!("{ip}:{port}"),
        Ok(IpAddr::V6(ip)) => *addr = format!("[{ip}]:{port}"),
        Err(_) => {}
    }
}

fn check_periods(
    section: &str,
    sync: GoDuration,
    min: GoDuration,
    push: &mut impl FnMut(&str, String),
) {
    if sync.as_nanos() <= 0 {
        push(
            &format!("{section}.syncPeriod"),
            format!("{sync}: must be greater than 0"),
        );
    }
    if min.is_negative() {
        push(
            &format!("{section}.minSyncPeriod"),
            format!("{min}: must be greater than or equal to 0"),
        );
    } else if min > sync {
        push(
            &format!("{section}.minSyncPeriod"),
            format!("{min}: must be less than or equal to {section}.syncPeriod ({sync})"),
        );
    }
}

fn non_negative(name: &str, d: GoDuration, push: &mut impl FnMut(&str, String)) {
    if d.is_negative() {
        push(name, format!("{d}: must be greater than or equal to 0"));
    }
}

/// A CIDR as Go's `net.ParseCIDR` takes it (host bits may be set); a bare address is refused.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .map_err(|_| format!("{s:?} is not a valid CIDR (e.g. 10.0.0.0/8)"))
}

/// `IP:port`, IPv6 in brackets, port 1..=65535.
pub fn parse_host_port(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s.parse().map_err(|_| format!("{s:?}: must be IP:port"))?;
    if addr.port() == 0 {
        return Err(format!("{s:?}: must be a valid port (1-65535)"));
    }
    Ok(addr)
}

/// `utilnet.ParsePortRange`: empty, `low-high` or `base+size`.
fn parse_port_range(s: &str) -> Result<(), String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(());
    }
    let bad = || format!("{s:?}: must be a valid port range (e.g. 300-2000)");
    let (low, high) = if let Some((a, b)) = s.split_once('-') {
        let a: u32 = a.parse().map_err(|_| bad())?;
        let b: u32 = b.parse().map_err(|_| bad())?;
        (a, b)
    } else if let Some((a, n)) = s.split_once('+') {
        let a: u32 = a.parse().map_err(|_| bad())?;
        let n: u32 = n.parse().map_err(|_| bad())?;
        (a, a.saturating_add(n).saturating_sub(1))
    } else {
        let a: u32 = s.parse().map_err(|_| bad())?;
        (a, a)
    };
    if low > high || high > 65535 {
        return Err(bad());
    }
    Ok(())
}

fn lookup<'a>(value: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(value, |v, key| v.get(key))
}

/// What kube-proxy-ipvs does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Read and acted on.
    Used,
    /// Read and validated, but not acted on: a value other than the default is logged as a
    /// warning.
    Ignored,
    /// Used, and some values are refused (the note says which).
    Restricted,
}

/// One field of the v1alpha1 type: its path, its flag, and what kube-proxy-ipvs does with it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The path in the file.
    pub path: &'static str,
    /// kube-proxy's flag for it, if any.
    pub flag: Option<&'static str>,
    /// What kube-proxy-ipvs does with it.
    pub support: Support,
    /// Why, or which part of the agent uses it.
    pub note: &'static str,
}

const fn field(
    path: &'static str,
    flag: Option<&'static str>,
    support: Support,
    note: &'static str,
) -> Field {
    Field {
        path,
        flag,
        support,
        note,
    }
}

use Support::{Ignored, Restricted, Used};

/// Every field of `KubeProxyConfiguration` v1alpha1 (leaves; maps as a whole).
pub const FIELDS: &[Field] = &[
    field(
        "apiVersion",
        None,
        Restricted,
        "must be kubeproxy.config.k8s.io/v1alpha1",
    ),
    field("kind", None, Restricted, "must be KubeProxyConfiguration"),
    field(
        "mode",
        Some("proxy-mode"),
        Restricted,
        "ipvs or empty (taken as ipvs); iptables, nftables and kernelspace are refused",
    ),
    field(
        "featureGates",
        Some("feature-gates"),
        Restricted,
        "KubeProxyIPVS=false is refused; other gates are logged and ignored",
    ),
    field(
        "hostnameOverride",
        Some("hostname-override"),
        Used,
        "the node name, trimmed and lower-cased",
    ),
    field(
        "bindAddress",
        Some("bind-address"),
        Ignored,
        "only picks the family of the default healthz/metrics addresses; the primary-node-IP override is not implemented",
    ),
    field(
        "healthzBindAddress",
        Some("healthz-bind-address"),
        Used,
        "/healthz and /livez (health module)",
    ),
    field(
        "metricsBindAddress",
        Some("metrics-bind-address"),
        Used,
        "/metrics (metrics module)",
    ),
    field(
        "bindAddressHardFail",
        Some("bind-address-hard-fail"),
        Used,
        "a failed healthz or metrics bind is fatal instead of retried every 5s",
    ),
    field(
        "enableProfiling",
        Some("profiling"),
        Ignored,
        "there is no Go pprof; use perf or tokio-console",
    ),
    field(
        "showHiddenMetricsForVersion",
        Some("show-hidden-metrics-for-version"),
        Ignored,
        "no metric is hidden",
    ),
    field(
        "clientConnection.kubeconfig",
        Some("kubeconfig"),
        Used,
        "the API client",
    ),
    field(
        "clientConnection.qps",
        Some("kube-api-qps"),
        Used,
        "the API client's rate limit",
    ),
    field(
        "clientConnection.burst",
        Some("kube-api-burst"),
        Used,
        "the API client's rate limit",
    ),
    field(
        "clientConnection.contentType",
        Some("kube-api-content-type"),
        Ignored,
        "the client speaks JSON",
    ),
    field(
        "clientConnection.acceptContentTypes",
        None,
        Ignored,
        "the client speaks JSON",
    ),
    field(
        "ipvs.scheduler",
        Some("ipvs-scheduler"),
        Used,
        "the virtual servers' scheduler",
    ),
    field(
        "ipvs.syncPeriod",
        Some("ipvs-sync-period"),
        Used,
        "full resync period; health timeout is twice it",
    ),
    field(
        "ipvs.minSyncPeriod",
        Some("ipvs-min-sync-period"),
        Used,
        "debounce of the sync loop",
    ),
    field(
        "ipvs.excludeCIDRs",
        Some("ipvs-exclude-cidrs"),
        Used,
        "virtual servers never deleted",
    ),
    field(
        "ipvs.gracefulTerminationTimeout",
        Some("ipvs-graceful-termination-timeout"),
        Used,
        "the agent's own: bound of a removed real server's drain (kube-proxy warns, ignores it)",
    ),
    field(
        "ipvs.vipBinding",
        Some("vip-binding"),
        Used,
        "the agent's own: VIPs as addresses on kube-ipvs0 (kube-proxy's way) or as local routes",
    ),
    field(
        "ipvs.strictARP",
        Some("ipvs-strict-arp"),
        Used,
        "arp_ignore/arp_announce sysctls",
    ),
    field(
        "ipvs.tcpTimeout",
        Some("ipvs-tcp-timeout"),
        Used,
        "IPVS timeouts (ipvs_timeouts())",
    ),
    field(
        "ipvs.tcpFinTimeout",
        Some("ipvs-tcpfin-timeout"),
        Used,
        "IPVS timeouts (ipvs_timeouts())",
    ),
    field(
        "ipvs.udpTimeout",
        Some("ipvs-udp-timeout"),
        Used,
        "IPVS timeouts (ipvs_timeouts())",
    ),
    field(
        "iptables.masqueradeAll",
        Some("masquerade-all"),
        Used,
        "SNAT of all cluster-IP traffic",
    ),
    field(
        "iptables.masqueradeBit",
        Some("iptables-masquerade-bit"),
        Used,
        "the SNAT fwmark",
    ),
    field(
        "iptables.syncPeriod",
        Some("iptables-sync-period"),
        Ignored,
        "iptables mode only; ipvs.syncPeriod applies",
    ),
    field(
        "iptables.minSyncPeriod",
        Some("iptables-min-sync-period"),
        Ignored,
        "iptables mode only; ipvs.minSyncPeriod applies",
    ),
    field(
        "iptables.localhostNodePorts",
        Some("iptables-localhost-nodeports"),
        Ignored,
        "iptables mode only; IPVS never serves NodePorts on loopback",
    ),
    field(
        "iptables.snatNodeInternalIP",
        None,
        Ignored,
        "iptables mode only",
    ),
    field(
        "clusterCIDR",
        Some("cluster-cidr"),
        Used,
        "local traffic detection (ClusterCIDR) and the IP families",
    ),
    field(
        "detectLocalMode",
        Some("detect-local-mode"),
        Used,
        "local traffic detection",
    ),
    field(
        "detectLocal.bridgeInterface",
        Some("pod-bridge-interface"),
        Used,
        "local traffic detection (BridgeInterface)",
    ),
    field(
        "detectLocal.interfaceNamePrefix",
        Some("pod-interface-name-prefix"),
        Used,
        "local traffic detection (InterfaceNamePrefix)",
    ),
    field(
        "nodePortAddresses",
        Some("nodeport-addresses"),
        Used,
        "NodePort addresses; localhost is ignored",
    ),
    field(
        "oomScoreAdj",
        Some("oom-score-adj"),
        Used,
        "written to /proc/self/oom_score_adj (write_oom_score_adj())",
    ),
    field(
        "configSyncPeriod",
        Some("config-sync-period"),
        Ignored,
        "watches are level-triggered; ipvs.syncPeriod re-reads everything",
    ),
    field(
        "conntrack.maxPerCore",
        Some("conntrack-max-per-core"),
        Used,
        "nf_conntrack_max (conntrack_sysctls())",
    ),
    field(
        "conntrack.min",
        Some("conntrack-min"),
        Used,
        "nf_conntrack_max (conntrack_sysctls())",
    ),
    field(
        "conntrack.tcpEstablishedTimeout",
        Some("conntrack-tcp-timeout-established"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.tcpCloseWaitTimeout",
        Some("conntrack-tcp-timeout-close-wait"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.tcpBeLiberal",
        Some("conntrack-tcp-be-liberal"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.udpTimeout",
        Some("conntrack-udp-timeout"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.udpStreamTimeout",
        Some("conntrack-udp-timeout-stream"),
        Used,
        "conntrack_sysctls()",
    ),
    field("logging.verbosity", Some("v"), Used, "the log filter"),
    field(
        "logging.format",
        Some("logging-format"),
        Used,
        "text or json logs",
    ),
    field(
        "logging.flushFrequency",
        Some("log-flush-frequency"),
        Ignored,
        "logs are not buffered",
    ),
    field(
        "logging.vmodule",
        Some("vmodule"),
        Ignored,
        "use RUST_LOG for per-module levels",
    ),
    field(
        "logging.options.text.infoBufferSize",
        None,
        Ignored,
        "logs are not buffered",
    ),
    field(
        "logging.options.text.splitStream",
        None,
        Ignored,
        "all logs go to stderr",
    ),
    field(
        "logging.options.json.infoBufferSize",
        None,
        Ignored,
        "logs are not buffered",
    ),
    field(
        "logging.options.json.splitStream",
        None,
        Ignored,
        "all logs go to stderr",
    ),
    field(
        "portRange",
        None,
        Ignored,
        "unused since the userspace proxy was removed",
    ),
    field(
        "nftables.masqueradeAll",
        None,
        Ignored,
        "nftables mode only",
    ),
    field(
        "nftables.masqueradeBit",
        None,
        Ignored,
        "nftables mode only",
    ),
    field("nftables.syncPeriod", None, Ignored, "nftables mode only"),
    field(
        "nftables.minSyncPeriod",
        None,
        Ignored,
        "nftables mode only",
    ),
    field("winkernel.networkName", None, Ignored, "Windows only"),
    field("winkernel.sourceVip", None, Ignored, "Windows only"),
    field("winkernel.enableDSR", None, Ignored, "Windows only"),
    field(
        "winkernel.rootHnsEndpointName",
        None,
        Ignored,
        "Windows only",
    ),
    field(
        "winkernel.forwardHealthCheckVip",
        None,
        Ignored,
        "Windows only",
    ),
    field(
        "windowsRunAsService",
        Some("windows-service"),
        Ignored,
        "Windows only",
    ),
];

/// Writes `value` to `/proc/self/oom_score_adj`, as kube-proxy does at start (`oomScoreAdj`).
pub fn write_oom_score_adj(value: i32) -> std::io::Result<()> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
}
