//! Property tests: every encode/decode pair round-trips, on the wire layer and on the typed
//! layer; and a fuzz-style test feeds the decoder arbitrary and mutated bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipvs_netlink::ipvsadm;
use ipvs_netlink::service::FlagsAttr;
use ipvs_netlink::{
    AddressFamily, Command, DaemonState, Destination, ForwardMethod, IpvsMessage, MessageAttr,
    Netmask, Protocol, Scheduler, Service, ServiceAttr, ServiceFlags, ServiceKey, Stats,
    SyncDaemon, Timeouts, Tunnel, TunnelFlags, TunnelType,
};
use proptest::prelude::*;

fn addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
    ]
}

fn family() -> impl Strategy<Value = AddressFamily> {
    prop_oneof![Just(AddressFamily::Inet), Just(AddressFamily::Inet6)]
}

fn key() -> impl Strategy<Value = ServiceKey> {
    prop_oneof![
        (
            prop_oneof![
                Just(Protocol::Tcp),
                Just(Protocol::Udp),
                Just(Protocol::Sctp),
                any::<u16>().prop_map(Protocol::from_raw)
            ],
            addr(),
            any::<u16>()
        )
            .prop_map(|(protocol, address, port)| ServiceKey::Inet {
                protocol,
                address,
                port
            }),
        (family(), 1..=u32::MAX).prop_map(|(family, mark)| ServiceKey::Fwmark { family, mark }),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9_-]{1,15}"
}

fn scheduler() -> impl Strategy<Value = Scheduler> {
    prop_oneof![
        proptest::sample::select(Scheduler::KNOWN.to_vec()),
        name().prop_map(|n| Scheduler::from_name(&n)),
    ]
}

fn stats() -> impl Strategy<Value = Option<Stats>> {
    proptest::option::of(some_stats())
}

fn some_stats() -> impl Strategy<Value = Stats> {
    any::<[u32; 10]>().prop_map(|v| Stats {
        conns: v[0].into(),
        in_packets: v[1].into(),
        out_packets: v[2].into(),
        in_bytes: u64::from(v[3]) << 20,
        out_bytes: v[4].into(),
        cps: v[5].into(),
        in_pps: v[6].into(),
        out_pps: v[7].into(),
        in_bps: v[8].into(),
        out_bps: v[9].into(),
    })
}

prop_compose! {
    fn service()(key in key(), scheduler in scheduler(), flags in any::<u32>(),
                 timeout in any::<u32>(), mask in any::<u32>(),
                 pe in proptest::option::of(name()), stats in stats(), stats64 in stats())
                 -> Service {
        Service {
            netmask: Netmask::from_raw(key.family(), mask),
            key,
            scheduler,
            flags: ServiceFlags::from_bits_retain(flags),
            timeout: Duration::from_secs(timeout.into()),
            persistence_engine: pe,
            stats,
            stats64,
        }
    }
}

prop_compose! {
    fn destination()(address in addr(), port in any::<u16>(), fwd in 0u32..8,
                     weight in any::<u32>(), upper in any::<u32>(), lower in any::<u32>(),
                     tun in any::<(u8, u16, u16)>(), conns in any::<(u32, u32, u32)>(),
                     stats in stats(), stats64 in stats()) -> Destination {
        Destination {
            address,
            port,
            forward: ForwardMethod::from_raw(fwd),
            weight,
            upper_threshold: upper,
            lower_threshold: lower,
            tunnel: Tunnel {
                kind: TunnelType::from_raw(tun.0),
                port: tun.1,
                flags: TunnelFlags::from_bits_retain(tun.2),
            },
            active_connections: conns.0,
            inactive_connections: conns.1,
            persistent_connections: conns.2,
            stats,
            stats64,
        }
    }
}

prop_compose! {
    fn daemon()(backup in any::<bool>(), interface in name(), sync_id in any::<u32>(),
                max_length in proptest::option::of(any::<u16>()),
                group in proptest::option::of(addr()), port in proptest::option::of(any::<u16>()),
                ttl in proptest::option::of(any::<u8>())) -> SyncDaemon {
        SyncDaemon {
            state: if backup { DaemonState::Backup } else { DaemonState::Master },
            interface, sync_id, max_length, group, port, ttl,
        }
    }
}

/// Wire attributes, unknown ones included.
fn service_attr() -> impl Strategy<Value = ServiceAttr> {
    prop_oneof![
        any::<u16>().prop_map(ServiceAttr::AddressFamily),
        any::<u16>().prop_map(ServiceAttr::Protocol),
        any::<[u8; 16]>().prop_map(ServiceAttr::Address),
        any::<u16>().prop_map(ServiceAttr::Port),
        any::<u32>().prop_map(ServiceAttr::Fwmark),
        name().prop_map(ServiceAttr::Scheduler),
        any::<(u32, u32)>().prop_map(|(flags, mask)| ServiceAttr::Flags(FlagsAttr { flags, mask })),
        any::<u32>().prop_map(ServiceAttr::Timeout),
        any::<u32>().prop_map(ServiceAttr::Netmask),
        name().prop_map(ServiceAttr::PersistenceEngine),
        some_stats().prop_map(|s| ServiceAttr::Stats(s.to_attrs())),
        some_stats().prop_map(|s| ServiceAttr::Stats64(s.to_attrs64())),
        (
            13u16..0x3fff,
            0u16..4,
            proptest::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(k, flags, v)| {
                // Unknown kinds with any of NLA_F_NESTED and NLA_F_NET_BYTEORDER.
                ServiceAttr::Other(netlink_packet_core::DefaultNla::new(k | flags << 14, v))
            }),
    ]
}

proptest! {
    #[test]
    fn service_typed_round_trip(svc in service()) {
        let attrs = svc.to_attrs();
        prop_assert_eq!(Service::from_attrs(&attrs).unwrap(), svc.clone());
        let msg = IpvsMessage::new(Command::NewService, vec![MessageAttr::Service(attrs)]);
        let bytes = msg.to_genl_bytes();
        prop_assert_eq!(IpvsMessage::parse_genl(&bytes).unwrap(), msg);
    }

    #[test]
    fn destination_typed_round_trip(d in destination(), svc_family in family()) {
        let attrs = d.to_attrs();
        prop_assert_eq!(Destination::from_attrs(&attrs, svc_family).unwrap(), d.clone());
        let msg = IpvsMessage::new(Command::NewDest, vec![MessageAttr::Destination(attrs)]);
        prop_assert_eq!(IpvsMessage::parse_genl(&msg.to_genl_bytes()).unwrap(), msg);
    }

    #[test]
    fn daemon_typed_round_trip(d in daemon()) {
        prop_assert_eq!(SyncDaemon::from_attrs(&d.to_attrs()).unwrap(), d.clone());
        let msg = IpvsMessage::new(Command::NewDaemon, vec![MessageAttr::Daemon(d.to_attrs())]);
        prop_assert_eq!(IpvsMessage::parse_genl(&msg.to_genl_bytes()).unwrap(), msg);
    }

    #[test]
    fn timeouts_round_trip(t in any::<(u32, u32, u32)>()) {
        let t = Timeouts {
            tcp: Duration::from_secs(t.0.into()),
            tcp_fin: Duration::from_secs(t.1.into()),
            udp: Duration::from_secs(t.2.into()),
        };
        let msg = IpvsMessage::new(Command::SetConfig, t.to_attrs());
        let back = IpvsMessage::parse_genl(&msg.to_genl_bytes()).unwrap();
        prop_assert_eq!(Timeouts::from_attrs(&back.attrs), t);
    }

    #[test]
    fn wire_service_attrs_round_trip(attrs in proptest::collection::vec(service_attr(), 0..12)) {
        let msg = IpvsMessage::new(Command::SetService, vec![MessageAttr::Service(attrs)]);
        let bytes = msg.to_genl_bytes();
        let back = IpvsMessage::parse_genl(&bytes).unwrap();
        prop_assert_eq!(&back, &msg);
        prop_assert_eq!(back.to_genl_bytes(), bytes);
    }

    /// `ipvsadm -Sn` text of a service reads back as the same service (sorting aside).
    #[test]
    fn save_text_round_trips(svc in service()) {
        let mut svc = svc;
        svc.stats = None;
        svc.stats64 = None;
        svc.flags &= ServiceFlags::PERSISTENT | ServiceFlags::ONE_PACKET
            | ServiceFlags::SCHED1 | ServiceFlags::SCHED2 | ServiceFlags::SCHED3;
        if !svc.flags.contains(ServiceFlags::PERSISTENT) {
            svc.timeout = Duration::ZERO;
            svc.netmask = Netmask::host(svc.key.family());
        }
        if let ServiceKey::Inet { protocol, .. } = &mut svc.key
            && let Protocol::Other(_) = protocol {
            *protocol = Protocol::Tcp;
        }
        let line = ipvsadm::rule_of_service(&svc);
        let rules = ipvsadm::parse_rules(&line).unwrap();
        prop_assert_eq!(rules, vec![ipvsadm::Rule::AddService(svc)]);
    }

    /// Arbitrary bytes never make the decoder panic.
    #[test]
    fn decoder_survives_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = IpvsMessage::parse_genl(&bytes);
        for cmd in [Command::NewService, Command::NewDest, Command::SetInfo, Command::NewDaemon] {
            let _ = IpvsMessage::parse_body(cmd, &bytes);
        }
    }

    /// Valid messages with bytes flipped, cut or inserted decode to an error or to a
    /// message that re-encodes and decodes to itself; never a panic.
    #[test]
    fn decoder_survives_mutations(
        svc in service(), d in destination(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let msg = IpvsMessage::new(
            Command::NewDest,
            vec![MessageAttr::Service(svc.to_attrs()), MessageAttr::Destination(d.to_attrs())],
        );
        let mut bytes = msg.to_genl_bytes();
        for (at, v) in flips {
            let i = at % bytes.len();
            bytes[i] ^= v;
        }
        bytes.truncate(cut % (bytes.len() + 1));
        if let Ok(m) = IpvsMessage::parse_genl(&bytes) {
            let again = m.to_genl_bytes();
            prop_assert_eq!(IpvsMessage::parse_genl(&again).unwrap(), m.clone());
            for a in &m.attrs {
                match a {
                    MessageAttr::Service(s) => { let _ = Service::from_attrs(s); }
                    MessageAttr::Destination(s) => { let _ = Destination::from_attrs(s, AddressFamily::Inet); }
                    _ => {}
                }
            }
        }
    }
}

/// An unknown attribute with both NLA_F_NESTED and NLA_F_NET_BYTEORDER (a mutation CI's
/// proptest found) re-encodes with both: netlink-packet-core alone drops the second.
#[test]
fn unknown_attribute_keeps_both_type_flags() {
    let kind =
        0x3b0a | netlink_packet_core::NLA_F_NESTED | netlink_packet_core::NLA_F_NET_BYTEORDER;
    let unknown = netlink_packet_core::DefaultNla::new(kind, vec![0; 8]);
    let msg = IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(vec![ServiceAttr::Other(unknown)])],
    );
    let bytes = msg.to_genl_bytes();
    // genlmsghdr (4), the service attribute's header (4), then the unknown one's type.
    assert_eq!(u16::from_ne_bytes([bytes[10], bytes[11]]), kind);
    assert_eq!(IpvsMessage::parse_genl(&bytes).unwrap(), msg);
}

/// The ipvsadm sort reproduces its wrapping comparison: 192.168/16 before 10/8.
#[test]
fn ipvsadm_sort_wraps_like_ipvsadm() {
    let svc = |a: &str| {
        Service::new(
            ServiceKey::tcp(a.parse().unwrap(), 80),
            Scheduler::RoundRobin,
        )
    };
    let mut entries = vec![
        (svc("10.96.0.10"), vec![]),
        (svc("192.168.1.1"), vec![]),
        (svc("10.96.0.2"), vec![]),
    ];
    ipvsadm::sort(&mut entries);
    let order: Vec<String> = entries.iter().map(|(s, _)| s.key.to_string()).collect();
    assert_eq!(
        order,
        ["-t 192.168.1.1:80", "-t 10.96.0.2:80", "-t 10.96.0.10:80"]
    );
}
