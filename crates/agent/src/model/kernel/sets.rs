//! The KUBE-* ipsets, named, typed and commented as kube-proxy's IPVS mode makes them, plus the
//! agent's own ownership set.

use std::cmp::Ordering;
use std::fmt;
use std::sync::LazyLock;

use crate::model::kernel::SetKind;
use crate::model::snapshot::cluster::Family;

/// One set of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetDef {
    /// Its place in [`ALL`]: what a [`SetName`] holds. Private, so that every `SetDef` is one
    /// of the catalogue's.
    index: u8,
    /// The IPv4 name; IPv6 names come from [`SetName::as_str`].
    pub name: &'static str,
    /// Its type.
    pub kind: SetKind,
    /// The comment used by the iptables rules that match it.
    pub comment: &'static str,
}

macro_rules! sets {
    ($($id:ident = $name:literal, $kind:ident, $comment:literal;)*) => {
        /// The IPv4 names, in the catalogue's order: where [`position`] finds a set's index.
        const NAMES: &[&str] = &[$($name),*];
        $(
            #[doc = concat!("`", $name, "`: ", $comment, ".")]
            pub const $id: SetDef = SetDef {
                index: position($name),
                name: $name,
                kind: SetKind::$kind,
                comment: $comment,
            };
        )*
        /// Every set, in kube-proxy's order, then the agent's own.
        pub const ALL: &[SetDef] = &[$($id),*];
    };
}

/// The index of `name` in [`NAMES`], found when the catalogue is compiled (a name missing
/// there fails the build, not the agent).
const fn position(name: &str) -> u8 {
    let mut i = 0;
    while i < NAMES.len() {
        if same(NAMES[i].as_bytes(), name.as_bytes()) {
            return i as u8;
        }
        i += 1;
    }
    panic!("a set outside the catalogue")
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

sets! {
    LOOP_BACK = "KUBE-LOOP-BACK", HashIpPortIp, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose";
    CLUSTER_IP = "KUBE-CLUSTER-IP", HashIpPort, "Kubernetes service cluster ip + port for masquerade purpose";
    EXTERNAL_IP = "KUBE-EXTERNAL-IP", HashIpPort, "Kubernetes service external ip + port for masquerade and filter purpose";
    EXTERNAL_IP_LOCAL = "KUBE-EXTERNAL-IP-LOCAL", HashIpPort, "Kubernetes service external ip + port with externalTrafficPolicy=local";
    LOAD_BALANCER = "KUBE-LOAD-BALANCER", HashIpPort, "Kubernetes service lb portal";
    LOAD_BALANCER_FW = "KUBE-LOAD-BALANCER-FW", HashIpPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange";
    LOAD_BALANCER_LOCAL = "KUBE-LOAD-BALANCER-LOCAL", HashIpPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local";
    LOAD_BALANCER_SOURCE_IP = "KUBE-LOAD-BALANCER-SOURCE-IP", HashIpPortIp, "Kubernetes service load balancer ip + port + source IP for packet filter purpose";
    LOAD_BALANCER_SOURCE_CIDR = "KUBE-LOAD-BALANCER-SOURCE-CIDR", HashIpPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose";
    NODE_PORT_TCP = "KUBE-NODE-PORT-TCP", BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose";
    NODE_PORT_LOCAL_TCP = "KUBE-NODE-PORT-LOCAL-TCP", BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local";
    NODE_PORT_UDP = "KUBE-NODE-PORT-UDP", BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose";
    NODE_PORT_LOCAL_UDP = "KUBE-NODE-PORT-LOCAL-UDP", BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local";
    NODE_PORT_SCTP = "KUBE-NODE-PORT-SCTP-HASH", HashIpPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'";
    NODE_PORT_LOCAL_SCTP = "KUBE-NODE-PORT-LOCAL-SCTP-HASH", HashIpPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'";
    HEALTH_CHECK_NODE_PORT = "KUBE-HEALTH-CHECK-NODE-PORT", BitmapPort, "Kubernetes health check node port";
    IPVS_IPS = "KUBE-IPVS-IPS", HashIp, "Addresses on the ipvs interface";
    OWNED = "KUBE-IPVS-OWNED", HashIpPort, "IPVS virtual servers created by kube-proxy-ipvs";
}

/// The IPv6 names, by catalogue index: `KUBE-` becomes `KUBE-6-`, cut to 31 bytes, the kernel's
/// limit (`KUBE-6-LOAD-BALANCER-SOURCE-CID`). Made once, so that a name is a `&'static str`.
static V6_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    ALL.iter()
        .map(|def| {
            let mut name = format!("KUBE-6-{}", &def.name["KUBE-".len()..]);
            name.truncate(31);
            name
        })
        .collect()
});

/// The name of a set the agent makes: one catalogue entry in one family.
///
/// Two bytes, copied freely, where a `String` was built for every lookup; it reads as the
/// kernel's name (`Display`, `Debug`, [`SetName::as_str`]) and orders by that text, as the
/// names did when they were strings, so plans list sets in the same order.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SetName {
    index: u8,
    family: Family,
}

impl SetName {
    /// The set `def` in `family`.
    pub fn new(def: &SetDef, family: Family) -> Self {
        Self {
            index: def.index,
            family,
        }
    }

    /// The catalogue entry of a kernel name of either family, if it is one.
    pub fn lookup(name: &str) -> Option<Self> {
        ALL.iter().find_map(|def| {
            [Family::V4, Family::V6]
                .into_iter()
                .map(|f| Self::new(def, f))
                .find(|n| n.as_str() == name)
        })
    }

    /// Its catalogue entry.
    pub fn def(self) -> &'static SetDef {
        &ALL[usize::from(self.index)]
    }

    /// Its family.
    pub fn family(self) -> Family {
        self.family
    }

    /// The type the agent makes it with.
    pub fn kind(self) -> SetKind {
        self.def().kind
    }

    /// The name in the kernel.
    pub fn as_str(self) -> &'static str {
        match self.family {
            Family::V4 => self.def().name,
            Family::V6 => &V6_NAMES[usize::from(self.index)],
        }
    }
}

impl Ord for SetName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for SetName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq<str> for SetName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// The catalogue's set of the kernel name `name`, for tests that speak in kernel names.
#[cfg(test)]
pub(crate) fn named(name: &str) -> SetName {
    SetName::lookup(name).unwrap_or_else(|| panic!("{name} is not in the catalogue"))
}

impl fmt::Display for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_names_are_prefixed_and_cut_like_kube_proxy() {
        let v6 = |def| SetName::new(def, Family::V6).as_str();
        assert_eq!(v6(&CLUSTER_IP), "KUBE-6-CLUSTER-IP");
        assert_eq!(
            v6(&LOAD_BALANCER_SOURCE_CIDR),
            "KUBE-6-LOAD-BALANCER-SOURCE-CID"
        );
        assert_eq!(v6(&NODE_PORT_LOCAL_SCTP), "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS");
        assert_eq!(
            SetName::new(&CLUSTER_IP, Family::V4).as_str(),
            "KUBE-CLUSTER-IP"
        );
    }

    #[test]
    fn every_name_fits_the_kernel_and_leads_back_to_its_entry() {
        let mut seen = std::collections::BTreeSet::new();
        for def in ALL {
            for f in [Family::V4, Family::V6] {
                let name = SetName::new(def, f);
                assert!(name.as_str().len() <= 31, "{name}");
                assert_eq!(SetName::lookup(name.as_str()), Some(name));
                assert_eq!((name.def(), name.family(), name.kind()), (def, f, def.kind));
                assert!(seen.insert(name.as_str()), "{name} twice");
            }
        }
        assert_eq!(SetName::lookup("KUBE-NOT-OURS"), None);
        assert_eq!(SetName::lookup("kube-cluster-ip"), None);
    }

    #[test]
    fn names_order_as_their_text() {
        let mut names: Vec<SetName> = ALL
            .iter()
            .flat_map(|d| [SetName::new(d, Family::V4), SetName::new(d, Family::V6)])
            .collect();
        names.sort();
        let text: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        let mut sorted = text.clone();
        sorted.sort();
        assert_eq!(text, sorted);
        assert_ne!(names.first(), names.last());
    }

    #[test]
    fn a_name_reads_as_the_kernels() {
        let name = SetName::new(&OWNED, Family::V6);
        assert_eq!(
            format!("{name} {name:?}"),
            "KUBE-6-IPVS-OWNED \"KUBE-6-IPVS-OWNED\""
        );
        assert_eq!(std::mem::size_of::<SetName>(), 2);
    }
}
