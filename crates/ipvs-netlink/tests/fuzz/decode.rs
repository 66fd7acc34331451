//! What the fuzz target `ipvs_message` does with its bytes, shared with the regression test
//! `fuzz_regressions` (both include this file by path, so they cannot drift apart).
//!
//! The input is a generic-netlink payload (the 4-byte `genlmsghdr`, then attributes), as the
//! kernel sends it after the netlink header. It goes through every decoding layer a reply
//! from the kernel meets: the wire layer ([`IpvsMessage::parse_genl`]), the typed layer of
//! each object (services, destinations in both families, daemons, info, timeouts, counters)
//! and ipvsadm's text renderings of what decoded. The only property is that nothing panics:
//! each layer answers bad input with an `Err`.

use ipvs_netlink::{
    AddressFamily, Destination, Info, IpvsMessage, MessageAttr, Service, ServiceKey, SyncDaemon,
    Timeouts, Version, ipvsadm,
};

/// What decoded, so that tests can check the layers were reached.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    /// The wire layer accepted the message.
    pub message: bool,
    /// Typed services, destinations and daemons that decoded.
    pub typed: usize,
}

/// Decodes `data` through every layer; panics only if the library does.
pub fn decode(data: &[u8]) -> Reached {
    let mut reached = Reached::default();
    let Ok(message) = IpvsMessage::parse_genl(data) else {
        return reached;
    };
    reached.message = true;
    let _ = IpvsMessage::parse_body(message.command, data.get(4..).unwrap_or_default());
    let mut services = Vec::new();
    let mut destinations = Vec::new();
    for attr in &message.attrs {
        match attr {
            MessageAttr::Service(attrs) => {
                let _ = ServiceKey::from_attrs(attrs).map(|k| k.to_string());
                if let Ok(svc) = Service::from_attrs(attrs) {
                    reached.typed += 1;
                    let _ = ipvsadm::rule_of_service(&svc);
                    services.push(svc);
                }
            }
            MessageAttr::Destination(attrs) => {
                // The service's family is what a dump passes: try both.
                for family in [AddressFamily::Inet, AddressFamily::Inet6] {
                    if let Ok(dest) = Destination::from_attrs(attrs, family) {
                        reached.typed += 1;
                        destinations.push(dest);
                    }
                }
            }
            MessageAttr::Daemon(attrs) => {
                if let Ok(daemon) = SyncDaemon::from_attrs(attrs) {
                    reached.typed += 1;
                    let _ = format!("{daemon:?}");
                }
            }
            _ => {}
        }
    }
    let _ = Timeouts::from_attrs(&message.attrs);
    // Info comes in messages of its own: render listings with a fixed one otherwise.
    let info = Info::from_attrs(&message.attrs).unwrap_or(Info {
        version: Version::from_code(0x01_02_01),
        connection_table_size: 4096,
    });
    let _ = info.version.to_string();
    for svc in &services {
        for dest in &destinations {
            let _ = ipvsadm::rule_of_destination(&svc.key, dest);
        }
    }
    let mut entries: Vec<ipvsadm::Entry> = services
        .into_iter()
        .map(|svc| (svc, destinations.clone()))
        .collect();
    ipvsadm::sort(&mut entries);
    let _ = ipvsadm::save(&entries);
    let _ = ipvsadm::list(&info, &entries, true);
    let _ = ipvsadm::list(&info, &entries, false);
    reached
}
