//! The KUBE-* ipsets, named, typed and commented as kube-proxy's IPVS mode makes them, plus the
//! agent's own ownership set.

use crate::model::kernel::SetKind;
use crate::model::snapshot::cluster::Family;

/// One set of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetDef {
    /// The IPv4 name; IPv6 names come from [`set_name`].
    pub name: &'static str,
    /// Its type.
    pub kind: SetKind,
    /// The comment used by the iptables rules that match it.
    pub comment: &'static str,
}

macro_rules! sets {
    ($($id:ident = $name:literal, $kind:ident, $comment:literal;)*) => {
        $(
            #[doc = concat!("`", $name, "`: ", $comment, ".")]
            pub const $id: SetDef = SetDef { name: $name, kind: SetKind::$kind, comment: $comment };
        )*
        /// Every set, in kube-proxy's order, then the agent's own.
        pub const ALL: &[SetDef] = &[$($id),*];
    };
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

/// The set's name in a family: IPv6 names replace `KUBE-` with `KUBE-6-` and are cut to 31
/// bytes, the kernel's limit (`KUBE-6-LOAD-BALANCER-SOURCE-CID`).
pub fn set_name(def: &SetDef, family: Family) -> String {
    match family {
        Family::V4 => def.name.to_string(),
        Family::V6 => {
            let mut name = format!("KUBE-6-{}", &def.name["KUBE-".len()..]);
            name.truncate(31);
            name
        }
    }
}

/// The catalogue entry of a set name of either family.
pub fn lookup(name: &str) -> Option<(SetDef, Family)> {
    ALL.iter().find_map(|def| {
        [Family::V4, Family::V6]
            .into_iter()
            .find(|f| set_name(def, *f) == name)
            .map(|f| (*def, f))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_names_are_prefixed_and_cut_like_kube_proxy() {
        assert_eq!(set_name(&CLUSTER_IP, Family::V6), "KUBE-6-CLUSTER-IP");
        assert_eq!(
            set_name(&LOAD_BALANCER_SOURCE_CIDR, Family::V6),
            "KUBE-6-LOAD-BALANCER-SOURCE-CID"
        );
        assert_eq!(
            set_name(&NODE_PORT_LOCAL_SCTP, Family::V6),
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"
        );
        assert_eq!(set_name(&CLUSTER_IP, Family::V4), "KUBE-CLUSTER-IP");
        for def in ALL {
            for f in [Family::V4, Family::V6] {
                assert!(set_name(def, f).len() <= 31);
                assert_eq!(lookup(&set_name(def, f)), Some((*def, f)));
            }
        }
    }
}
