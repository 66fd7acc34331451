//! The kernel state the agent manages, as plain data: both what it wants (`desired`) and what
//! it found (`observe`) have this shape, and `plan` diffs two of them.
//!
//! # Layout
//! - [`sorted_map`]: the small sorted-vector map a virtual server's real servers are held in.
//! - [`rolling`]: which share of the real servers a periodic full sync reads.
//! - [`host`]: the host's addresses, read with the rest of the kernel state.
//! - [`chains`]: the agent's iptables chains and the jumps into them, the part of iptables it
//!   owns.
//! - [`canonical`](mod@canonical): the one spelling rules are compared in, whoever wrote them.
//! - [`scheduler_name`]: a virtual server's scheduler by name, and the kernel's schedulers.
//! - [`real_server`]: a real server's address and port, in 20 bytes.
//! - [`sets`]: the KUBE-* ipsets the agent makes and their typed names ([`SetName`]), the part
//!   of ipset it owns.

pub mod canonical;
pub mod chains;
pub mod host;
pub mod real_server;
pub mod rolling;
pub mod scheduler_name;
pub mod sets;
pub mod sorted_map;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;

use crate::model::snapshot::cluster::{Family, Protocol};
pub use real_server::RealServer;
pub use scheduler_name::SchedulerName;
pub use sets::SetName;
use sorted_map::SortedMap;

/// The dummy link that holds every VIP, named as kube-proxy names it.
pub const LINK_NAME: &str = "kube-ipvs0";

/// IPVS scheduler flag `IP_VS_SVC_F_SCHED2`: `sh-port` / `mh-port`.
pub const SCHED_FLAG_PORT: u32 = 0x10;
/// IPVS scheduler flag `IP_VS_SVC_F_SCHED1`: `sh-fallback` / `mh-fallback`. Without it, `sh`
/// and `mh` send a client whose hash lands on a weight-0 (draining) real server nowhere ("no
/// destination available"); with it they pick the next available one (kube-proxy B23).
pub const SCHED_FLAG_FALLBACK: u32 = 0x08;

/// What identifies an IPVS virtual server made for a Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VsKey {
    /// The virtual address.
    pub address: IpAddr,
    /// The protocol.
    pub protocol: Protocol,
    /// The port.
    pub port: u16,
}

impl fmt::Display for VsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}",
            SocketAddr::new(self.address, self.port),
            self.protocol
        )
    }
}

/// The connections IPVS tracks for one real server (`ipvsadm -Ln`'s `ActiveConn` and
/// `InActConn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Connections {
    /// Established connections.
    pub active: u32,
    /// Connections in any other state (SYN_RECV, FIN_WAIT, TIME_WAIT...).
    pub inactive: u32,
}

impl Connections {
    /// True when IPVS tracks no connection at all: the real server can go without breaking one.
    pub fn is_idle(&self) -> bool {
        self.active == 0 && self.inactive == 0
    }
}

/// An IPVS virtual server and its real servers (always masquerade).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct VirtualServer {
    /// The scheduler's kernel name.
    pub scheduler: SchedulerName,
    /// Scheduler flags (`SCHED_FLAG_*`), without the persistent and hashed bits.
    pub sched_flags: u32,
    /// Persistence (session affinity) timeout; `None` when not persistent.
    pub persistence: Option<Duration>,
    /// Real servers and their weights.
    pub destinations: Destinations,
    /// Connection counts of the real servers, as read from the kernel. Only an observation has
    /// them, and only the sync that made it: the desired state leaves this empty, and the sync
    /// loop forgets the counts after using them, because they change without the agent. A real
    /// server missing here has unknown counts.
    pub connections: ConnectionCounts,
}

impl VirtualServer {
    /// True when the service's own settings (not its destinations) differ.
    pub fn settings_differ(&self, other: &VirtualServer) -> bool {
        self.scheduler != other.scheduler
            || self.sched_flags != other.sched_flags
            || self.persistence != other.persistence
    }
}

/// The real servers of one virtual server as the kernel holds them, with their connection
/// counts: what a targeted read of one virtual server gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RealServers {
    /// Real servers and their weights.
    pub destinations: Destinations,
    /// Their connection counts, as just read.
    pub connections: ConnectionCounts,
}

/// The real servers of one virtual server and their weights, ordered by address.
pub type Destinations = SortedMap<RealServer, u32>;

/// The connection counts of one virtual server's real servers, ordered by address.
pub type ConnectionCounts = SortedMap<RealServer, Connections>;

/// The ipset types the agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    /// `hash:ip`
    HashIp,
    /// `hash:ip,port`
    HashIpPort,
    /// `hash:ip,port,ip`
    HashIpPortIp,
    /// `hash:ip,port,net`
    HashIpPortNet,
    /// `bitmap:port` over 0-65535
    BitmapPort,
}

impl SetKind {
    /// The type's name as `ipset` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::HashIp => "hash:ip",
            SetKind::HashIpPort => "hash:ip,port",
            SetKind::HashIpPortIp => "hash:ip,port,ip",
            SetKind::HashIpPortNet => "hash:ip,port,net",
            SetKind::BitmapPort => "bitmap:port",
        }
    }
}

/// One entry of a set, rendered in `ipset save` syntax by `Display`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetEntry {
    /// `10.0.0.1`
    Ip(IpAddr),
    /// `10.0.0.1,tcp:80`
    IpPort(IpAddr, Protocol, u16),
    /// `10.244.0.2,tcp:8080,10.244.0.2`
    IpPortIp(IpAddr, Protocol, u16, IpAddr),
    /// `1.2.3.4,tcp:80,10.0.0.0/8`
    IpPortNet(IpAddr, Protocol, u16, IpNet),
    /// `30080`
    Port(u16),
}

impl fmt::Display for SetEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetEntry::Ip(ip) => write!(f, "{ip}"),
            SetEntry::IpPort(ip, p, port) => write!(f, "{ip},{p}:{port}"),
            SetEntry::IpPortIp(ip, p, port, ip2) => write!(f, "{ip},{p}:{port},{ip2}"),
            SetEntry::IpPortNet(ip, p, port, net) => write!(f, "{ip},{p}:{port},{net}"),
            SetEntry::Port(port) => write!(f, "{port}"),
        }
    }
}

/// A set: its type and family, and its entries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Set {
    /// The set's type.
    pub kind: SetKind,
    /// Its family (ignored for `bitmap:port`).
    pub family: Family,
    /// Its entries.
    pub entries: BTreeSet<SetEntry>,
}

/// An iptables table the agent has chains in.
///
/// Declared in the order of their names, so that rules ordered by table keep the order
/// they had when tables were strings (drift's log lists chains in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// `filter`.
    Filter,
    /// `nat`.
    Nat,
}

impl Table {
    /// Every table, in the order the agent writes them (`nat` first, as kube-proxy).
    pub const ALL: [Table; 2] = [Table::Nat, Table::Filter];

    /// The table's name, as `iptables -t` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }

    /// The agent's chains in this table.
    pub fn chains(self) -> &'static [&'static str] {
        match self {
            Table::Filter => chains::FILTER_CHAINS,
            Table::Nat => chains::NAT_CHAINS,
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A jump from a built-in chain into one of the agent's chains, told apart from other
/// jumps by its comment (the agent prepends it, and deletes only it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Jump {
    /// Its table.
    pub table: Table,
    /// The built-in chain it is in (`PREROUTING`).
    pub chain: &'static str,
    /// Its comment (`kubernetes service portals`).
    pub comment: &'static str,
    /// The agent's chain it jumps to (`KUBE-SERVICES`).
    pub target: &'static str,
}

impl Jump {
    /// The rule after its chain: `-m comment --comment "..." -j TARGET`.
    pub fn spec(&self) -> String {
        format!(
            "-m comment --comment \"{}\" -j {}",
            self.comment, self.target
        )
    }

    /// The rule as `iptables-save` prints it: `-A CHAIN -m comment ...`.
    pub fn rule(&self) -> String {
        format!("-A {} {}", self.chain, self.spec())
    }
}

/// The agent's iptables rules of one family, in `iptables-save` form.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Rules {
    /// `(table, chain)` of every chain the agent owns.
    pub chains: BTreeSet<(Table, String)>,
    /// `(table, rule)` in order, each rule as `iptables-save` prints it (`-A KUBE-... ...`).
    pub rules: Vec<(Table, String)>,
    /// Jumps from built-in chains, in the order they must be prepended.
    pub jumps: Vec<Jump>,
}

/// A kernel setting under `/proc/sys`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sysctl {
    /// The path below `/proc/sys`, e.g. `net/ipv4/vs/conntrack`.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// Everything the agent programs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct KernelState {
    /// Whether `kube-ipvs0` exists.
    pub link: bool,
    /// Addresses on `kube-ipvs0`.
    pub addresses: BTreeSet<IpAddr>,
    /// IPVS virtual servers. Observed state holds every one in the kernel, foreign ones too.
    pub services: BTreeMap<VsKey, VirtualServer>,
    /// The KUBE-* sets by name.
    pub sets: BTreeMap<SetName, Set>,
    /// Rules by family.
    pub rules: BTreeMap<Family, Rules>,
    /// Sysctls to hold.
    pub sysctls: BTreeMap<String, String>,
}
