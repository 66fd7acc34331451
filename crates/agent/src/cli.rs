//! The command line, with kube-proxy's flag names and meanings.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ipnet::IpNet;

use crate::model::cluster::Family;
use crate::model::config::{LocalDetector, ProxyConfig};

/// kube-proxy-ipvs: a Kubernetes Service proxy on Linux IPVS, a drop-in for
/// `kube-proxy --proxy-mode=ipvs`.
#[derive(Debug, Parser)]
#[command(name = "kube-proxy-ipvs", version)]
pub struct Args {
    /// Which proxy mode to use; only `ipvs` is implemented.
    #[arg(long, default_value = "ipvs")]
    pub proxy_mode: String,
    /// The node's name; an endpoint is local when its nodeName equals it. Defaults to the
    /// host name.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The IPVS scheduler (rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, ...).
    #[arg(long, default_value = "rr")]
    pub ipvs_scheduler: String,
    /// How often the kernel is read again and repaired.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ipvs_sync_period: Duration,
    /// The minimum time between two syncs.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub ipvs_min_sync_period: Duration,
    /// Comma-separated CIDRs whose IPVS virtual servers are never deleted.
    #[arg(long, value_delimiter = ',', value_parser = parse_cidr)]
    pub ipvs_exclude_cidrs: Vec<IpNet>,
    /// Set arp_ignore=1 and arp_announce=2 (MetalLB L2 mode needs it).
    #[arg(long)]
    pub ipvs_strict_arp: bool,
    /// IPVS TCP timeout (0 leaves it as is).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub ipvs_tcp_timeout: Duration,
    /// IPVS TCP FIN timeout (0 leaves it as is).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub ipvs_tcpfin_timeout: Duration,
    /// IPVS UDP timeout (0 leaves it as is).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub ipvs_udp_timeout: Duration,
    /// SNAT all traffic sent to cluster IPs.
    #[arg(long)]
    pub masquerade_all: bool,
    /// The fwmark bit that marks packets for SNAT (0..31).
    #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub iptables_masquerade_bit: u8,
    /// The pod CIDRs of the cluster (comma-separated, one per family).
    #[arg(long, value_delimiter = ',', value_parser = parse_cidr)]
    pub cluster_cidr: Vec<IpNet>,
    /// How pod traffic is recognised: ClusterCIDR, NodeCIDR, BridgeInterface,
    /// InterfaceNamePrefix.
    #[arg(long, default_value = "ClusterCIDR")]
    pub detect_local_mode: String,
    /// The pods' bridge (BridgeInterface mode).
    #[arg(long, default_value = "")]
    pub pod_bridge_interface: String,
    /// The pods' interface name prefix (InterfaceNamePrefix mode).
    #[arg(long, default_value = "")]
    pub pod_interface_name_prefix: String,
    /// Comma-separated CIDRs of the node addresses NodePorts are served on, or `primary`.
    /// Empty: every local address.
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Vec<String>,
    /// A file or directory of YAML manifests (Services, EndpointSlices, Nodes) used instead of
    /// an API server; changes to it are applied.
    #[arg(long)]
    pub manifests: Option<PathBuf>,
    /// Run one full sync, then exit (0 on success).
    #[arg(long)]
    pub once: bool,
    /// Print the plan and the iptables-restore input without touching the kernel.
    #[arg(long)]
    pub dry_run: bool,
    /// Remove everything the agent owns, and nothing else, then exit.
    #[arg(long)]
    pub cleanup: bool,
    /// Log verbosity (0..10), as kube-proxy's -v.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// A bad command line, naming the flag.
#[derive(Debug, thiserror::Error)]
#[error("--{flag}: {message}")]
pub struct ArgError {
    /// The flag.
    pub flag: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Args {
    /// The node's name: `--hostname-override` or the host name, lower-cased as kube-proxy does.
    pub fn node_name(&self) -> String {
        let name = self.hostname_override.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        });
        name.trim().to_lowercase()
    }

    /// Checks the flags against each other and builds the proxy configuration.
    pub fn config(&self) -> Result<ProxyConfig, ArgError> {
        if self.proxy_mode != "ipvs" {
            return Err(ArgError {
                flag: "proxy-mode",
                message: format!(
                    "mode {:?} is not implemented by kube-proxy-ipvs; only \"ipvs\" is",
                    self.proxy_mode
                ),
            });
        }
        if self.ipvs_sync_period.is_zero() {
            return Err(ArgError {
                flag: "ipvs-sync-period",
                message: "must be greater than 0".into(),
            });
        }
        if self.ipvs_min_sync_period > self.ipvs_sync_period {
            return Err(ArgError {
                flag: "ipvs-min-sync-period",
                message: "must not exceed --ipvs-sync-period".into(),
            });
        }
        if self.ipvs_scheduler.is_empty()
            || !self
                .ipvs_scheduler
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(ArgError {
                flag: "ipvs-scheduler",
                message: format!("{:?} is not a scheduler name", self.ipvs_scheduler),
            });
        }
        let local_detector = match self.detect_local_mode.as_str() {
            "ClusterCIDR" | "" => {
                if self.cluster_cidr.is_empty() {
                    LocalDetector::None
                } else {
                    LocalDetector::ClusterCidr(self.cluster_cidr.clone())
                }
            }
            // Filled from the Node's podCIDRs by the sync when it knows them.
            "NodeCIDR" => LocalDetector::NodeCidr(Vec::new()),
            "BridgeInterface" => {
                if self.pod_bridge_interface.is_empty() {
                    return Err(ArgError {
                        flag: "pod-bridge-interface",
                        message: "required with --detect-local-mode=BridgeInterface".into(),
                    });
                }
                LocalDetector::BridgeInterface(self.pod_bridge_interface.clone())
            }
            "InterfaceNamePrefix" => {
                if self.pod_interface_name_prefix.is_empty() {
                    return Err(ArgError {
                        flag: "pod-interface-name-prefix",
                        message: "required with --detect-local-mode=InterfaceNamePrefix".into(),
                    });
                }
                LocalDetector::InterfaceNamePrefix(self.pod_interface_name_prefix.clone())
            }
            other => {
                return Err(ArgError {
                    flag: "detect-local-mode",
                    message: format!(
                        "{other:?}: must be ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix"
                    ),
                });
            }
        };
        let mut nodeport_addresses = Vec::new();
        for a in self
            .nodeport_addresses
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
        {
            if a == "primary" {
                if self.nodeport_addresses.len() > 1 {
                    return Err(ArgError {
                        flag: "nodeport-addresses",
                        message: "\"primary\" cannot be combined with CIDRs".into(),
                    });
                }
                // Expanded from the Node's addresses by the sync when it knows them.
                continue;
            }
            nodeport_addresses.push(parse_cidr(a).map_err(|message| ArgError {
                flag: "nodeport-addresses",
                message,
            })?);
        }
        let mut families = vec![Family::V4];
        if self.cluster_cidr.iter().any(|c| matches!(c, IpNet::V6(_))) {
            families.push(Family::V6);
        }
        Ok(ProxyConfig {
            node_name: self.node_name(),
            scheduler: self.ipvs_scheduler.clone(),
            masquerade_all: self.masquerade_all,
            masquerade_bit: self.iptables_masquerade_bit,
            local_detector,
            nodeport_primary: self
                .nodeport_addresses
                .iter()
                .any(|a| a.trim() == "primary"),
            nodeport_addresses,
            exclude_cidrs: self.ipvs_exclude_cidrs.clone(),
            random_fully: true,
            strict_arp: self.ipvs_strict_arp,
            families,
        })
    }
}

/// Parses a CIDR (`10.0.0.0/8`); a plain address is refused, as kube-proxy refuses it.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.trim()
        .parse::<IpNet>()
        .map_err(|_| format!("{s:?} is not a CIDR"))
}

/// Parses a Go duration (`30s`, `1m30s`, `500ms`, `1h`, `0`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!("{s:?} is not a duration (like 30s, 1m30s, 500ms)"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("{s:?}: bad number"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("{s:?}: unknown unit {u:?}")),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }

    fn args(extra: &[&str]) -> Result<ProxyConfig, String> {
        let mut argv = vec!["kube-proxy-ipvs", "--hostname-override", "Node-A"];
        argv.extend_from_slice(extra);
        let a = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
        a.config().map_err(|e| e.to_string())
    }

    #[test]
    fn kube_proxy_flags_map_to_the_config() {
        let c = args(&[
            "--ipvs-scheduler",
            "sh",
            "--masquerade-all",
            "--cluster-cidr",
            "10.244.0.0/16,fd00::/48",
            "--iptables-masquerade-bit",
            "13",
        ])
        .unwrap();
        assert_eq!(c.node_name, "node-a");
        assert_eq!(c.scheduler, "sh");
        assert!(c.masquerade_all);
        assert_eq!(c.masquerade_mark(), 0x2000);
        assert_eq!(c.families, vec![Family::V4, Family::V6]);
    }

    #[test]
    fn bad_flags_are_named() {
        assert!(
            args(&["--proxy-mode", "iptables"])
                .unwrap_err()
                .contains("--proxy-mode")
        );
        assert!(args(&["--iptables-masquerade-bit", "32"]).is_err());
        assert!(
            args(&["--ipvs-exclude-cidrs", "10.0.0.1"])
                .unwrap_err()
                .contains("not a CIDR")
        );
        assert!(
            args(&["--detect-local-mode", "BridgeInterface"])
                .unwrap_err()
                .contains("--pod-bridge-interface")
        );
        assert!(
            args(&["--nodeport-addresses", "primary,10.0.0.0/8"])
                .unwrap_err()
                .contains("primary")
        );
        assert!(
            args(&["--ipvs-min-sync-period", "1m", "--ipvs-sync-period", "30s"])
                .unwrap_err()
                .contains("min-sync")
        );
    }
}
