//! What the rest of the agent reads from a loaded configuration: periods, addresses, sysctls,
//! and the model's [`ProxyConfig`].

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::validate::{parse_cidr, parse_host_port};
use super::{Error, FieldError, GoDuration, KubeProxyConfiguration, Problem};
use crate::model::snapshot::cluster::Family;
use crate::model::snapshot::config::{LocalDetector, ProxyConfig, VipBinding};

impl KubeProxyConfiguration {
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
    /// `min`, and only when `maxPerCore > 0`; a zero timeout leaves its sysctl alone. The
    /// init container (deploy/init-sysctls.sh) writes them, and does the rest of what
    /// kube-proxy does there: it only ever raises `nf_conntrack_max`, and raises the module's
    /// `hashsize` to a quarter of it.
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
        let nodeport_addresses =
            cidr_list("nodePortAddresses", &self.node_port_addresses, &mut errs);
        let exclude_cidrs = cidr_list("ipvs.excludeCIDRs", &self.ipvs.exclude_cidrs, &mut errs);
        let local_detector = self.local_detector(cluster_cidrs);
        let masquerade_bit = self.masquerade_bit(&mut errs);
        if !errs.is_empty() {
            return Err(Error::invalid(errs));
        }
        let graceful_termination_timeout = self.graceful_termination_timeout()?;
        let vip_binding = self.vip_binding()?;
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
            bind_address: crate::sloppy_ip::parse_ip(&self.bind_address)
                .filter(|ip| !ip.is_unspecified()),
            node_ips: Vec::new(),
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
            // The modules already loaded are added at start (`dataplane::modules::loaded`).
            allowed_schedulers: self.ipvs.allowed_schedulers.iter().cloned().collect(),
            scheduler_annotation: self.ipvs.scheduler_annotation.unwrap_or(true),
        })
    }

    /// How local traffic is told (`detectLocalMode`); by the cluster CIDRs unless another
    /// mode is named, and not at all without them.
    fn local_detector(&self, cluster_cidrs: Vec<IpNet>) -> LocalDetector {
        match self.detect_local_mode.as_str() {
            "NodeCIDR" => LocalDetector::NodeCidr(Vec::new()),
            "BridgeInterface" => {
                LocalDetector::BridgeInterface(self.detect_local.bridge_interface.clone())
            }
            "InterfaceNamePrefix" => {
                LocalDetector::InterfaceNamePrefix(self.detect_local.interface_name_prefix.clone())
            }
            _ if cluster_cidrs.is_empty() => LocalDetector::None,
            _ => LocalDetector::ClusterCidr(cluster_cidrs),
        }
    }

    /// `iptables.masqueradeBit` (14 when unset); out of range, an error in `errs`.
    fn masquerade_bit(&self, errs: &mut Vec<FieldError>) -> u8 {
        let masquerade_bit = self.iptables.masquerade_bit.unwrap_or(14);
        u8::try_from(masquerade_bit)
            .ok()
            .filter(|b| *b <= 31)
            .unwrap_or_else(|| {
                errs.push(FieldError::new(
                    "iptables.masqueradeBit",
                    Problem::OutOfRange {
                        got: None,
                        min: 0,
                        max: 31,
                    },
                ));
                14
            })
    }

    /// `ipvs.gracefulTerminationTimeout`, the model's default when unset.
    fn graceful_termination_timeout(&self) -> Result<Duration, Error> {
        match self.ipvs.graceful_termination_timeout {
            None => Ok(crate::model::snapshot::config::DEFAULT_GRACEFUL_TERMINATION_TIMEOUT),
            Some(d) if d.is_negative() => Err(Error::invalid(vec![FieldError::new(
                "ipvs.gracefulTerminationTimeout",
                Problem::NegativeTimeout { got: d },
            )])),
            Some(d) => Ok(d.to_std()),
        }
    }

    /// `ipvs.vipBinding`, the default when unset.
    fn vip_binding(&self) -> Result<VipBinding, Error> {
        match &self.ipvs.vip_binding {
            None => Ok(VipBinding::default()),
            Some(v) => v
                .parse()
                .map_err(|e: crate::model::snapshot::config::BadVipBinding| {
                    Error::invalid(vec![FieldError::new("ipvs.vipBinding", e)])
                }),
        }
    }
}

/// The CIDRs of a list such as `nodePortAddresses`: `all` is every address of both
/// families; a bad entry is an error in `errs` naming `path[i]`.
fn cidr_list(path: &str, list: &[String], errs: &mut Vec<FieldError>) -> Vec<IpNet> {
    let mut out = Vec::new();
    for (i, c) in list.iter().enumerate() {
        match c.as_str() {
            // `primary` is expanded from the Node's addresses by the sync; loopback
            // is never served in IPVS mode.
            "primary" | "localhost" => {}
            "all" => {
                out.extend(["0.0.0.0/0", "::/0"].map(|n| n.parse::<IpNet>().unwrap_or_default()))
            }
            _ => match parse_cidr(c) {
                Ok(n) => out.push(n),
                Err(m) => errs.push(FieldError::new(format!("{path}[{i}]"), m)),
            },
        }
    }
    out
}
