//! The part of the configuration that shapes the desired kernel state.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::model::snapshot::cluster::Family;

/// How the agent tells pod traffic from other traffic, for masquerade decisions
/// (`--detect-local-mode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalDetector {
    /// No detector: only node-originated traffic with a VIP source is masqueraded.
    None,
    /// Pod traffic comes from these cluster CIDRs (`--cluster-cidr`).
    ClusterCidr(Vec<IpNet>),
    /// Pod traffic comes from the Node's `spec.podCIDRs`.
    NodeCidr(Vec<IpNet>),
    /// Pod traffic comes in through this bridge.
    BridgeInterface(String),
    /// Pod traffic comes in through interfaces with this name prefix.
    InterfaceNamePrefix(String),
}

/// Settings of the proxy that the desired state depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The node's name; an endpoint is local when its `nodeName` equals it.
    pub node_name: String,
    /// `--ipvs-scheduler` (default `rr`).
    pub scheduler: String,
    /// `--masquerade-all`.
    pub masquerade_all: bool,
    /// `--iptables-masquerade-bit` (0..=31, default 14).
    pub masquerade_bit: u8,
    /// Local traffic detection.
    pub local_detector: LocalDetector,
    /// `--nodeport-addresses`: NodePorts are served on local addresses inside these CIDRs;
    /// empty means every local address.
    pub nodeport_addresses: Vec<IpNet>,
    /// `--nodeport-addresses=primary`: NodePorts are served on the Node's primary address of
    /// each family only (from the Node object).
    pub nodeport_primary: bool,
    /// `--bind-address` when it names one address: kube-proxy takes it as the node's IP of
    /// its family, ahead of the Node's addresses.
    pub bind_address: Option<IpAddr>,
    /// The node's IP of each family, as kube-proxy's `nodeIPs`: filled by the model from
    /// [`bind_address`](Self::bind_address) and the Node object, never set by hand.
    pub node_ips: Vec<IpAddr>,
    /// `--ipvs-exclude-cidrs`: virtual servers inside these are never deleted.
    pub exclude_cidrs: Vec<IpNet>,
    /// Whether `iptables` supports `--random-fully` on MASQUERADE.
    pub random_fully: bool,
    /// `--ipvs-strict-arp`: `arp_ignore=1`, `arp_announce=2` (MetalLB L2 needs it).
    pub strict_arp: bool,
    /// The IP families the agent serves (IPv4, IPv6 or both): both from the configuration,
    /// narrowed at start to those the host supports (`dataplane::families`).
    pub families: Vec<Family>,
    /// `--ipvs-graceful-termination-timeout`: the longest a removed TCP real server drains at
    /// weight 0 before it is deleted with whatever connections it still has; zero deletes
    /// removed real servers at once. kube-proxy has no bound (a connection that never ends,
    /// or one that IPVS keeps reusing, kube-proxy #81775, keeps a dead pod's real server
    /// forever). See [`DEFAULT_GRACEFUL_TERMINATION_TIMEOUT`].
    pub graceful_termination_timeout: Duration,
    /// The `PreferSameTrafficDistribution` feature gate: honour node hints
    /// (`trafficDistribution: PreferSameNode`). On by default, as in Kubernetes 1.34.
    pub prefer_same_node: bool,
    /// The running kernel's version (`None`: unknown), which decides `conn_reuse_mode`.
    pub kernel_version: Option<KernelVersion>,
    /// `--vip-binding`: how the kernel edge binds the VIPs on `kube-ipvs0`. The desired state
    /// does not depend on it (its `addresses` are the VIPs either way).
    pub vip_binding: VipBinding,
    /// Schedulers of [`LOADED_UNDER_LOCK`](crate::model::desired::scheduler::LOADED_UNDER_LOCK) that a
    /// Service's annotation may name: those the operator allowed
    /// (`--ipvs-allowed-schedulers`) and those whose module was loaded when the agent
    /// started. Any other scheduler is always allowed.
    pub allowed_schedulers: BTreeSet<String>,
    /// Whether a Service's own scheduler (its annotation) is used at all
    /// (`--ipvs-scheduler-annotation`); without it every Service gets [`Self::scheduler`].
    pub scheduler_annotation: bool,
}

/// How the VIPs are made local to the node (`--vip-binding`, `ipvs.vipBinding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VipBinding {
    /// A /32 or /128 address on `kube-ipvs0` per VIP, as kube-proxy binds them.
    #[default]
    Address,
    /// A `local` route per IPv4 VIP in table `local` whose device is `kube-ipvs0`: the
    /// kernel walks the link's address list for every address it adds, so a node with tens
    /// of thousands of VIPs binds them several times faster as routes. IPv6 VIPs stay
    /// addresses: the kernel refuses an IPv6 route through a link that is down.
    Route,
}

impl VipBinding {
    /// The value as the flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            VipBinding::Address => "address",
            VipBinding::Route => "route",
        }
    }
}

impl std::fmt::Display for VipBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value of `--vip-binding` that is neither `address` nor `route`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a VIP binding (address or route)")]
pub struct BadVipBinding(pub String);

impl std::str::FromStr for VipBinding {
    type Err = BadVipBinding;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "address" => Ok(VipBinding::Address),
            "route" => Ok(VipBinding::Route),
            _ => Err(BadVipBinding(s.to_string())),
        }
    }
}

/// The default of `--ipvs-graceful-termination-timeout`: 15 minutes, the kernel's default IPVS
/// timeout of an established TCP connection (`ipvsadm --set 900 ...`). By then IPVS has
/// forgotten every idle connection by itself, so the bound only ends connections still
/// sending 15 minutes after their endpoint left, which outlasts the grace period of nearly
/// every pod (30 s by default) and cuts the endless drains of kube-proxy #81775.
pub const DEFAULT_GRACEFUL_TERMINATION_TIMEOUT: Duration = Duration::from_secs(15 * 60);

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            node_name: String::new(),
            scheduler: "rr".into(),
            masquerade_all: false,
            masquerade_bit: 14,
            local_detector: LocalDetector::None,
            nodeport_addresses: Vec::new(),
            nodeport_primary: false,
            bind_address: None,
            node_ips: Vec::new(),
            exclude_cidrs: Vec::new(),
            random_fully: true,
            strict_arp: false,
            families: vec![Family::V4],
            graceful_termination_timeout: DEFAULT_GRACEFUL_TERMINATION_TIMEOUT,
            prefer_same_node: true,
            kernel_version: None,
            vip_binding: VipBinding::Address,
            allowed_schedulers: BTreeSet::new(),
            scheduler_annotation: true,
        }
    }
}

impl ProxyConfig {
    /// The masquerade mark, `1 << masquerade_bit`.
    pub fn masquerade_mark(&self) -> u32 {
        1u32 << u32::from(self.masquerade_bit.min(31))
    }
}

/// A kernel's `major.minor` version, from its release string (`/proc/sys/kernel/osrelease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    /// The major number.
    pub major: u32,
    /// The minor number.
    pub minor: u32,
}

impl KernelVersion {
    /// Reads the leading `major.minor` of a release such as `6.1.0-56-cloud-amd64` or
    /// `5.4.17-2136.el8uek.x86_64`; `None` when it does not start with one.
    pub fn parse(release: &str) -> Option<Self> {
        let mut numbers = release.trim().split(['.', '-', '+', '_']);
        let major = numbers.next()?.parse().ok()?;
        let minor = numbers.next()?.parse().ok()?;
        Some(Self { major, minor })
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What the agent does with `net/ipv4/vs/conn_reuse_mode`, kube-proxy's kernel-version rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnReuse {
    /// Below 4.1 the sysctl does not exist: left alone, with an error logged.
    Unsupported,
    /// From 4.1 to 5.8 it is set to 0: with 1 those kernels drop the first SYN of a
    /// connection that reuses a stale IPVS entry's port (a 1 s connect delay, kubernetes#70747).
    SetZero,
    /// From 5.9 the kernel fixed that delay, and 0 would keep traffic on deleted real servers
    /// (kubernetes#81775): left as the node has it (kubernetes#93297).
    LeftAsIs,
    /// The kernel's version is unknown: left alone.
    Unknown,
}

impl ConnReuse {
    /// The rule for a kernel.
    pub fn for_kernel(kernel: Option<KernelVersion>) -> Self {
        const MIN: KernelVersion = KernelVersion { major: 4, minor: 1 };
        const FIXED: KernelVersion = KernelVersion { major: 5, minor: 9 };
        match kernel {
            None => Self::Unknown,
            Some(k) if k < MIN => Self::Unsupported,
            Some(k) if k < FIXED => Self::SetZero,
            Some(_) => Self::LeftAsIs,
        }
    }
}

/// The default session-affinity timeout of Kubernetes (`10800` seconds).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10800);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vip_binding_parses_its_two_values_and_nothing_else() {
        assert_eq!("address".parse(), Ok(VipBinding::Address));
        assert_eq!("route".parse(), Ok(VipBinding::Route));
        assert_eq!(VipBinding::default(), VipBinding::Address);
        for bad in ["", "Route", "routes", " address"] {
            assert_eq!(
                bad.parse::<VipBinding>(),
                Err(BadVipBinding(bad.to_string()))
            );
        }
        for mode in [VipBinding::Address, VipBinding::Route] {
            assert_eq!(mode.to_string().parse(), Ok(mode));
        }
    }
}
