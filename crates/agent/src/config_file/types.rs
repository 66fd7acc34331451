//! The v1alpha1 `KubeProxyConfiguration` type, every field of it, as Go's JSON decoder reads
//! it (a `null` is the zero value).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::duration::{GoDuration, TimeOrDuration};

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
    /// The agent's own field: schedulers whose module IPVS would load under its lock
    /// (`lblc`, `lblcr`) that a Service's annotation may name even when the module is not
    /// loaded (`--ipvs-allowed-schedulers`). Written back only when set.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Vec::is_empty")]
    pub allowed_schedulers: Vec<String>,
    /// The agent's own field: export IPVS's per-virtual-server counters
    /// (`--ipvs-service-metrics`; off by default, one series per virtual server). Written
    /// back only when set.
    #[serde(
        deserialize_with = "nullable",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub service_metrics: bool,
    /// The agent's own field: whether a Service's scheduler annotation is read
    /// (`--ipvs-scheduler-annotation`; unset: true). Written back only when set.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub scheduler_annotation: Option<bool>,
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
    /// Must be [`API_VERSION`](super::API_VERSION).
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
    /// Must be [`KIND`](super::KIND).
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
