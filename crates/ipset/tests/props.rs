//! Property tests: `ipset save` rendering and parsing are inverse for every entry and header.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libipset::{
    Entry, EntryOptions, Family, Header, Member, Net, Protocol, Set, SetName, SetType, parse_save,
    render_save,
};
use proptest::prelude::*;

fn addr(v6: bool) -> BoxedStrategy<IpAddr> {
    if v6 {
        any::<u128>()
            .prop_map(|a| IpAddr::V6(Ipv6Addr::from(a)))
            .boxed()
    } else {
        any::<u32>()
            .prop_map(|a| IpAddr::V4(Ipv4Addr::from(a)))
            .boxed()
    }
}

fn net(v6: bool) -> BoxedStrategy<Net> {
    let max: u8 = if v6 { 128 } else { 32 };
    (addr(v6), 1..=max)
        .prop_map(|(a, p)| Net::new(a, p).unwrap())
        .boxed()
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Sctp),
        Just(Protocol::UdpLite)
    ]
}

fn entry(t: SetType, v6: bool) -> BoxedStrategy<Entry> {
    match t {
        SetType::HashIp => addr(v6).prop_map(Entry::Ip).boxed(),
        SetType::HashNet => net(v6).prop_map(Entry::Net).boxed(),
        SetType::HashIpPort => (addr(v6), protocol(), any::<u16>())
            .prop_map(|(ip, protocol, port)| Entry::IpPort { ip, protocol, port })
            .boxed(),
        SetType::HashIpPortIp => (addr(v6), protocol(), any::<u16>(), addr(v6))
            .prop_map(|(ip, protocol, port, ip2)| Entry::IpPortIp {
                ip,
                protocol,
                port,
                ip2,
            })
            .boxed(),
        SetType::HashIpPortNet => (addr(v6), protocol(), any::<u16>(), net(v6))
            .prop_map(|(ip, protocol, port, net)| Entry::IpPortNet {
                ip,
                protocol,
                port,
                net,
            })
            .boxed(),
        SetType::HashNetPort => (net(v6), protocol(), any::<u16>())
            .prop_map(|(net, protocol, port)| Entry::NetPort {
                net,
                protocol,
                port,
            })
            .boxed(),
        SetType::BitmapPort => any::<u16>().prop_map(Entry::Port).boxed(),
    }
}

fn set_type() -> impl Strategy<Value = SetType> {
    proptest::sample::select(SetType::ALL.to_vec())
}

fn options() -> impl Strategy<Value = EntryOptions> {
    (
        proptest::option::of(any::<u32>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of(any::<u64>()),
        proptest::option::of("[a-zA-Z0-9 ._:/-]{0,40}"),
    )
        .prop_map(|(timeout, packets, bytes, comment)| EntryOptions {
            timeout,
            packets,
            bytes,
            comment,
        })
}

fn set() -> impl Strategy<Value = Set> {
    (set_type(), any::<bool>(), "[A-Za-z0-9_-]{1,31}").prop_flat_map(|(t, v6, name)| {
        let name = SetName::new(name).unwrap();
        let header = if t == SetType::BitmapPort {
            Header::bitmap_port(name, 0, 65535)
        } else {
            let family = if v6 { Family::Inet6 } else { Family::Inet };
            Header::hash(name, t, family)
                .with_hashsize(1024)
                .with_maxelem(65536)
        };
        let members = proptest::collection::vec(
            (entry(t, v6), options()).prop_map(|(entry, options)| Member { entry, options }),
            0..8,
        );
        (Just(header), members).prop_map(|(header, members)| Set { header, members })
    })
}

proptest! {
    #[test]
    fn entries_round_trip(
        (t, e) in (set_type(), any::<bool>())
            .prop_flat_map(|(t, v6)| entry(t, v6).prop_map(move |e| (t, e)))
    ) {
        prop_assert_eq!(e.set_type(), t);
        prop_assert_eq!(Entry::parse(t, &e.to_string()).unwrap(), e);
    }

    #[test]
    fn save_documents_round_trip(sets in proptest::collection::vec(set(), 0..4)) {
        let text = render_save(&sets);
        prop_assert_eq!(parse_save(&text).unwrap(), sets);
    }
}
