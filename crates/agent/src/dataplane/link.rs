//! The `kube-ipvs0` dummy link and the host's addresses, over rtnetlink.

use std::collections::BTreeMap;
use std::net::IpAddr;

use futures::TryStreamExt;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::{Handle, LinkDummy};

use super::Error;
use crate::model::desired::LocalAddress;

/// An rtnetlink connection.
#[derive(Clone)]
pub struct Links {
    handle: Handle,
}

/// An address as the kernel reported it, kept to delete it later.
#[derive(Debug, Clone)]
pub struct Address {
    /// The interface index.
    pub index: u32,
    /// The address.
    pub ip: IpAddr,
    message: AddressMessage,
}

impl Links {
    /// Opens a connection; its driver runs on the current tokio runtime.
    pub fn connect() -> Result<Links, Error> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(|e| Error::Netlink {
            what: "rtnetlink socket".into(),
            message: e.to_string(),
        })?;
        tokio::spawn(conn);
        Ok(Links { handle })
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

    /// Every address on every interface.
    pub async fn addresses(&self) -> Result<Vec<Address>, Error> {
        let mut stream = self.handle.address().get().execute();
        let mut out = Vec::new();
        while let Some(msg) = stream
            .try_next()
            .await
            .map_err(|e| netlink("list addresses", e))?
        {
            // IFA_LOCAL is the interface's own address on point-to-point links; IFA_ADDRESS
            // otherwise. Prefer LOCAL when present, as `ip addr` does.
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
                    message: msg,
                });
            }
        }
        Ok(out)
    }

    /// The host's addresses with their interface names.
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
            .ok_or_else(|| Error::Netlink {
                what: format!("create dummy link {name}"),
                message: "link missing after creation".into(),
            })
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
            .del(address.message.clone())
            .execute()
            .await
            .map_err(|e| netlink(&format!("delete address {}", address.ip), e))
    }

    /// A deletion message for `ip` on link `index`, when the address was not listed first.
    pub fn address_on(index: u32, ip: IpAddr) -> Address {
        let mut message = AddressMessage::default();
        message.header.index = index;
        message.header.family = if ip.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        message.header.prefix_len = if ip.is_ipv4() { 32 } else { 128 };
        message.attributes.push(AddressAttribute::Address(ip));
        if ip.is_ipv4() {
            message.attributes.push(AddressAttribute::Local(ip));
        }
        Address { index, ip, message }
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

fn netlink(what: &str, e: rtnetlink::Error) -> Error {
    Error::Netlink {
        what: what.to_string(),
        message: e.to_string(),
    }
}
