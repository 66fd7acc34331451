//! The `kube-ipvs0` dummy link, the host's addresses and the agent's VIP routes, over
//! rtnetlink.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::{Handle, LinkDummy, RouteMessageBuilder};

use super::Error;
use super::paced_dump::PacedDumps;
use crate::model::desired::LocalAddress;
use crate::model::kernel::LINK_NAME;

/// The routing protocol number of the agent's routes (`ip route ... proto 194`): the kernel
/// does not interpret it, and it tells the agent's `local` routes from the ones the kernel
/// makes for addresses (`proto kernel`), so that neither ever deletes the other's.
pub const VIP_ROUTE_PROTOCOL: u8 = 194;
/// The metric of a VIP route. The kernel's route for an address has metric 0; a different
/// metric lets both exist for one VIP at once (same key otherwise), which switching between
/// the two bindings relies on.
pub const VIP_ROUTE_METRIC: u32 = 1024;
/// The metric of a VIP's bridge route on `lo`, held while the last IPv4 address of
/// `kube-ipvs0` is removed: the kernel then flushes every IPv4 route whose device is
/// `kube-ipvs0` (it disables IPv4 on a link that has no address left), the VIP routes too.
pub const BRIDGE_ROUTE_METRIC: u32 = 1025;
/// The kernel's `local` routing table.
const RT_TABLE_LOCAL: u8 = 255;

/// An rtnetlink connection.
#[derive(Clone)]
pub struct Links {
    handle: Handle,
    /// The socket of the address dumps, read as they are taken in.
    dumps: PacedDumps,
    /// The socket of the route dumps, read as they are taken in, with `NETLINK_GET_STRICT_CHK`,
    /// so that they are filtered by the kernel (one table, one protocol) instead of sending
    /// every route of the host.
    strict_dumps: PacedDumps,
}

/// One of the agent's routes as the kernel listed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VipRoute {
    /// The VIP.
    pub ip: Ipv4Addr,
    /// The route's device.
    pub index: u32,
    /// Its metric.
    pub metric: u32,
}

/// An address as the kernel reported it, kept to delete it later: what a deletion must name
/// (the kernel matches the link, the address and its prefix length), not the whole message,
/// which took 250 bytes and more per VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// The interface index.
    pub index: u32,
    /// The address.
    pub ip: IpAddr,
    /// Its prefix length.
    pub prefix_len: u8,
}

impl Address {
    /// The message that deletes it: `IFA_ADDRESS`, and `IFA_LOCAL` for IPv4 (as `ip addr del`
    /// sends them).
    fn deletion(&self) -> AddressMessage {
        let mut message = AddressMessage::default();
        message.header.index = self.index;
        message.header.family = if self.ip.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        message.header.prefix_len = self.prefix_len;
        message.attributes.push(AddressAttribute::Address(self.ip));
        if self.ip.is_ipv4() {
            message.attributes.push(AddressAttribute::Local(self.ip));
        }
        message
    }
}

impl Links {
    /// Opens a connection; its driver runs on the current tokio runtime.
    pub fn connect() -> Result<Links, Error> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(|source| Error::Io {
            what: "rtnetlink socket",
            source,
        })?;
        tokio::spawn(conn);
        // Beside the connection's sockets, so in their network namespace.
        let dumps = PacedDumps::open(false)?;
        let strict_dumps = PacedDumps::open(true)?;
        Ok(Links {
            handle,
            dumps,
            strict_dumps,
        })
    }

    /// The agent's IPv4 routes in table `local` (protocol [`VIP_ROUTE_PROTOCOL`], type
    /// `local`), on every device: VIP routes on `kube-ipvs0` and bridges on `lo`.
    pub async fn vip_routes(&self) -> Result<Vec<VipRoute>, Error> {
        let mut filter = RouteMessageBuilder::<Ipv4Addr>::new()
            .table_id(RT_TABLE_LOCAL.into())
            .protocol(RouteProtocol::Other(VIP_ROUTE_PROTOCOL))
            .kind(RouteType::Local)
            .build();
        // A dump request must leave the scope at 0 (universe); the builder's default.
        filter.header.scope = RouteScope::Universe;
        let mut out = Vec::new();
        let request = RouteNetlinkMessage::GetRoute(filter);
        self.strict_dumps
            .each("list routes", request, |m| {
                let RouteNetlinkMessage::NewRoute(msg) = m else {
                    return;
                };
                // A kernel without strict dumps ignores the filter: check each route again.
                if msg.header.protocol != RouteProtocol::Other(VIP_ROUTE_PROTOCOL)
                    || msg.header.kind != RouteType::Local
                    || msg.header.destination_prefix_length != 32
                    || route_table(&msg) != u32::from(RT_TABLE_LOCAL)
                {
                    return;
                }
                let mut ip = None;
                let mut index = None;
                let mut metric = 0;
                for a in &msg.attributes {
                    match a {
                        RouteAttribute::Destination(RouteAddress::Inet(d)) => ip = Some(*d),
                        RouteAttribute::Oif(i) => index = Some(*i),
                        RouteAttribute::Priority(p) => metric = *p,
                        _ => {}
                    }
                }
                if let (Some(ip), Some(index)) = (ip, index) {
                    out.push(VipRoute { ip, index, metric });
                }
            })
            .await?;
        Ok(out)
    }

    /// Adds (or replaces) the agent's `local` route for `ip` in table `local` through link
    /// `index` with `metric`: `ip route replace local IP dev LINK table local proto 194
    /// scope host metric METRIC`.
    pub async fn add_vip_route(&self, index: u32, ip: Ipv4Addr, metric: u32) -> Result<(), Error> {
        self.handle
            .route()
            .add(vip_route(index, ip, metric))
            .replace()
            .execute()
            .await
            .map_err(|e| netlink(&format!("add local route {ip}"), e))
    }

    /// Deletes the agent's route for `ip` through link `index` with `metric`; the kernel
    /// matches the protocol and the metric, so its own route for an address stays.
    pub async fn del_vip_route(&self, index: u32, ip: Ipv4Addr, metric: u32) -> Result<(), Error> {
        self.handle
            .route()
            .del(vip_route(index, ip, metric))
            .execute()
            .await
            .map_err(|e| netlink(&format!("delete local route {ip}"), e))
    }

    /// Interface names by index.
    pub async fn interfaces(&self) -> Result<BTreeMap<u32, String>, Error> {
        let mut links = self.handle.link().get().execute();
        let mut out = BTreeMap::new();
        while let Some(msg) = links
            .try_next()
            .await
            .map_err(|e| netlink("list links", e))?
        {
            let name = msg.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            });
            if let Some(name) = name {
                out.insert(msg.header.index, name);
            }
        }
        Ok(out)
    }

    /// Every address on every interface, taken in as the dump comes ([`PacedDumps`]).
    pub async fn addresses(&self) -> Result<Vec<Address>, Error> {
        let mut out = Vec::new();
        let request = RouteNetlinkMessage::GetAddress(AddressMessage::default());
        self.dumps
            .each("list addresses", request, |m| {
                let RouteNetlinkMessage::NewAddress(msg) = m else {
                    return;
                };
                // IFA_LOCAL is the interface's own address on point-to-point links;
                // IFA_ADDRESS otherwise. Prefer LOCAL when present, as `ip addr` does.
                let local = msg.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Local(ip) => Some(*ip),
                    _ => None,
                });
                let addr = msg.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                });
                if let Some(ip) = local.or(addr) {
                    out.push(Address {
                        index: msg.header.index,
                        ip,
                        prefix_len: msg.header.prefix_len,
                    });
                }
            })
            .await?;
        Ok(out)
    }

    /// The host's addresses with their interface names, but for the VIPs on `kube-ipvs0`
    /// ([`crate::model::kernel::host::Host`] says why).
    pub fn local_addresses(
        interfaces: &BTreeMap<u32, String>,
        addresses: &[Address],
    ) -> Vec<LocalAddress> {
        addresses
            .iter()
            .map(|a| LocalAddress {
                interface: interfaces.get(&a.index).cloned().unwrap_or_default(),
                address: a.ip,
            })
            .filter(|a| a.interface != LINK_NAME)
            .collect()
    }

    /// Creates a dummy link named `name` (left down) and returns its index.
    pub async fn create_dummy(&self, name: &str) -> Result<u32, Error> {
        self.handle
            .link()
            .add(LinkDummy::new(name).build())
            .execute()
            .await
            .map_err(|e| netlink(&format!("create dummy link {name}"), e))?;
        let ifaces = self.interfaces().await?;
        ifaces
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(i, _)| *i)
            .ok_or_else(|| Error::LinkMissing(name.to_string()))
    }

    /// Adds `ip` as a host address (/32 or /128) on link `index`.
    pub async fn add_address(&self, index: u32, ip: IpAddr) -> Result<(), Error> {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        self.handle
            .address()
            .add(index, ip, prefix)
            .replace()
            .execute()
            .await
            .map_err(|e| netlink(&format!("add address {ip}"), e))
    }

    /// Deletes an address the kernel reported.
    pub async fn del_address(&self, address: &Address) -> Result<(), Error> {
        self.handle
            .address()
            .del(address.deletion())
            .execute()
            .await
            .map_err(|e| netlink(&format!("delete address {}", address.ip), e))
    }

    /// The host address (/32 or /128) `ip` on link `index`, to delete one not listed first.
    pub fn address_on(index: u32, ip: IpAddr) -> Address {
        Address {
            index,
            ip,
            prefix_len: if ip.is_ipv4() { 32 } else { 128 },
        }
    }

    /// Deletes link `index`.
    pub async fn delete_link(&self, index: u32) -> Result<(), Error> {
        self.handle
            .link()
            .del(index)
            .execute()
            .await
            .map_err(|e| netlink("delete link", e))
    }
}

/// The agent's route for a VIP, for adding or deleting it.
fn vip_route(index: u32, ip: Ipv4Addr, metric: u32) -> RouteMessage {
    RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(ip, 32)
        .table_id(RT_TABLE_LOCAL.into())
        .protocol(RouteProtocol::Other(VIP_ROUTE_PROTOCOL))
        .scope(RouteScope::Host)
        .kind(RouteType::Local)
        .output_interface(index)
        .priority(metric)
        .build()
}

/// A route's table: the header's, or `RTA_TABLE` for ids above 255.
fn route_table(msg: &RouteMessage) -> u32 {
    msg.attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(msg.header.table.into())
}

fn netlink(what: &str, e: rtnetlink::Error) -> Error {
    Error::request(what, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_addresses_leave_the_vips_on_kube_ipvs0_out() {
        let interfaces = BTreeMap::from([(1, "lo".to_string()), (7, LINK_NAME.to_string())]);
        let addresses = [
            Links::address_on(1, "127.0.0.1".parse().unwrap()),
            Links::address_on(7, "10.96.0.1".parse().unwrap()),
            Links::address_on(9, "192.168.0.2".parse().unwrap()),
        ];
        let host = Links::local_addresses(&interfaces, &addresses);
        let seen: Vec<(&str, String)> = host
            .iter()
            .map(|a| (a.interface.as_str(), a.address.to_string()))
            .collect();
        assert_eq!(
            seen,
            [("lo", "127.0.0.1".into()), ("", "192.168.0.2".into())],
            "a link gone since its address was listed keeps the address, unnamed"
        );
    }

    #[test]
    fn an_address_is_deleted_by_its_link_address_and_prefix() {
        let v4 = Address {
            index: 7,
            ip: "10.96.0.1".parse().unwrap(),
            prefix_len: 24,
        };
        let m = v4.deletion();
        assert_eq!(
            (m.header.index, m.header.family, m.header.prefix_len),
            (7, AddressFamily::Inet, 24)
        );
        assert_eq!(
            m.attributes,
            [
                AddressAttribute::Address(v4.ip),
                AddressAttribute::Local(v4.ip)
            ]
        );
        let v6 = Links::address_on(7, "fd00::1".parse().unwrap()).deletion();
        assert_eq!(
            (v6.header.family, v6.header.prefix_len),
            (AddressFamily::Inet6, 128)
        );
        assert_eq!(
            v6.attributes,
            [AddressAttribute::Address("fd00::1".parse().unwrap())]
        );
    }
}
