//! Golden byte vectors recorded in the lab: ipvsadm 1.31's requests and the answers of
//! Debian's 6.1 kernel, captured on an `nlmon` link by the lab test
//! `ipvsadm_requests_match_the_library_byte_for_byte` (which prints them). Each is asserted
//! both ways: bytes -> typed value, typed value -> bytes.
//!
//! The netlink header (16 bytes: length, type = the IPVS family id 0x1f in that boot, flags,
//! sequence, port id) is kept in the vectors for the record; the library's message layer
//! starts at the 4-byte `genlmsghdr` after it.

mod fixtures;

use std::time::Duration;

use ipvs_netlink::service::FlagsAttr;
use ipvs_netlink::{
    AddressFamily, Command, Destination, DestinationAttr, ForwardMethod, Info, IpvsMessage,
    MessageAttr, Scheduler, Service, ServiceAttr, ServiceFlags, ServiceKey, Stats, Timeouts,
    Tunnel, TunnelFlags, TunnelType, Version,
};

use fixtures::ip;

/// Hex digits with whitespace; on each line, `|` starts an annotation.
fn unhex(s: &str) -> Vec<u8> {
    let digits: String = s
        .lines()
        .flat_map(|l| l.split('|').next().unwrap_or("").chars())
        .filter(char::is_ascii_hexdigit)
        .collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

/// The genl payload of a captured netlink message.
fn genl(bytes: &[u8]) -> &[u8] {
    assert_eq!(
        u32::from_ne_bytes(bytes[..4].try_into().unwrap()) as usize,
        bytes.len()
    );
    &bytes[16..]
}

/// Clears `NLA_F_NESTED` on the top-level attributes: the kernel does not flag its nests,
/// ipvsadm and the library do.
fn unflag_nests(mut payload: Vec<u8>) -> Vec<u8> {
    let mut at = 4;
    while at + 4 <= payload.len() {
        let len = u16::from_ne_bytes([payload[at], payload[at + 1]]) as usize;
        payload[at + 3] &= 0x7f;
        at += (len + 3) & !3;
    }
    payload
}

/// `ipvsadm -A -t 10.96.0.10:80 -s rr`
const ADD_SERVICE: &str = "
    68000000 1f00 0500 2a50026b 6a00c083    | nlmsghdr: len 104, IPVS, REQUEST|ACK, seq, port
    01 01 0000                              | genl: IPVS_CMD_NEW_SERVICE, version 1
    5400 0180                               | IPVS_CMD_ATTR_SERVICE (nested flag), 84 bytes
      0600 0100 0200 0000                   |   AF = AF_INET
      0600 0200 0600 0000                   |   PROTOCOL = 6 (TCP)
      1400 0300 0a60000a 00000000 00000000 00000000 | ADDR = 10.96.0.10 (16-byte nf_inet_addr)
      0600 0400 0050 0000                   |   PORT = 80, big endian
      0700 0600 727200 00                   |   SCHED_NAME = \"rr\\0\" + pad
      0c00 0700 00000000 ffffffff           |   FLAGS = {flags 0, mask ~0}
      0800 0800 00000000                    |   TIMEOUT = 0
      0800 0900 ffffffff                    |   NETMASK = 255.255.255.255
";

#[test]
fn add_service_request() {
    let bytes = unhex(ADD_SERVICE);
    let key = ServiceKey::tcp(ip("10.96.0.10"), 80);
    let svc = Service::new(key, Scheduler::RoundRobin);
    let want = IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(svc.config_attrs())],
    );
    let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
    assert_eq!(got, want);
    let MessageAttr::Service(attrs) = &got.attrs[0] else {
        panic!()
    };
    assert_eq!(Service::from_attrs(attrs).unwrap(), svc);
    assert_eq!(want.to_genl_bytes(), genl(&bytes));
}

/// `ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.4:80 -i -w 3 --tun-type gue --tun-port 6080
/// --tun-csum -x 10 -y 2`
const ADD_TUNNEL_DEST: &str = "
    c8000000 1f00 0500 2b50026b 75008084    | nlmsghdr: len 200, REQUEST|ACK
    05 01 0000                              | IPVS_CMD_NEW_DEST
    5400 0180                               | IPVS_CMD_ATTR_SERVICE: ipvsadm sends a whole entry
      0600 0100 0200 0000                   |   AF = AF_INET
      0600 0200 0600 0000                   |   PROTOCOL = TCP
      1400 0300 0a60000a 00000000 00000000 00000000 | ADDR = 10.96.0.10
      0600 0400 0050 0000                   |   PORT = 80
      0500 0600 00 000000                   |   SCHED_NAME = \"\" (unused by the kernel here)
      0c00 0700 00000000 ffffffff           |   FLAGS
      0800 0800 00000000                    |   TIMEOUT
      0800 0900 ffffffff                    |   NETMASK
    6000 0280                               | IPVS_CMD_ATTR_DEST (nested flag), 96 bytes
      0600 0b00 0200 0000                   |   ADDR_FAMILY = AF_INET
      1400 0100 0af40004 00000000 00000000 00000000 | ADDR = 10.244.0.4
      0600 0200 0050 0000                   |   PORT = 80 (ipvsadm: a tunnel gets the service's)
      0800 0300 02000000                    |   FWD_METHOD = IP_VS_CONN_F_TUNNEL
      0800 0400 03000000                    |   WEIGHT = 3
      0500 0d00 01 000000                   |   TUN_TYPE = GUE
      0600 0e00 17c0 0000                   |   TUN_PORT = 6080, big endian
      0600 0f00 0100 0000                   |   TUN_FLAGS = CSUM
      0800 0500 0a000000                    |   U_THRESH = 10
      0800 0600 02000000                    |   L_THRESH = 2
";

#[test]
fn add_tunnel_destination_request() {
    let bytes = unhex(ADD_TUNNEL_DEST);
    let dest = Destination::new(ip("10.244.0.4"), 80, ForwardMethod::Tunnel)
        .with_weight(3)
        .with_thresholds(10, 2)
        .with_tunnel(Tunnel {
            kind: TunnelType::Gue,
            port: 6080,
            flags: TunnelFlags::CSUM,
        });
    let key = ServiceKey::tcp(ip("10.96.0.10"), 80);
    let mut ipvsadm_service = key.to_attrs();
    ipvsadm_service.extend([
        ServiceAttr::Scheduler(String::new()),
        ServiceAttr::Flags(FlagsAttr {
            flags: 0,
            mask: u32::MAX,
        }),
        ServiceAttr::Timeout(0),
        ServiceAttr::Netmask(u32::MAX),
    ]);
    let want = IpvsMessage::new(
        Command::NewDest,
        vec![
            MessageAttr::Service(ipvsadm_service),
            MessageAttr::Destination(dest.config_attrs()),
        ],
    );
    let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
    assert_eq!(got, want);
    assert_eq!(want.to_genl_bytes(), genl(&bytes));
    let MessageAttr::Destination(attrs) = &got.attrs[1] else {
        panic!()
    };
    assert_eq!(
        Destination::from_attrs(attrs, AddressFamily::Inet).unwrap(),
        dest
    );
}

/// `ipvsadm -Sn`'s destination dump request: the service key only, `REQUEST|ACK|DUMP`.
const DUMP_DESTS: &str = "
    44000000 1f00 0503 2c50026b 800000af    | nlmsghdr: flags 0x305
    08 01 0000                              | IPVS_CMD_GET_DEST
    3000 0180                               | IPVS_CMD_ATTR_SERVICE
      0600 0100 0200 0000                   |   AF
      0600 0200 0600 0000                   |   PROTOCOL
      1400 0300 0a60000a 00000000 00000000 00000000 | ADDR
      0600 0400 0050 0000                   |   PORT
";

#[test]
fn dump_destinations_request() {
    let bytes = unhex(DUMP_DESTS);
    let key = ServiceKey::tcp(ip("10.96.0.10"), 80);
    let want = IpvsMessage::new(Command::GetDest, vec![MessageAttr::Service(key.to_attrs())]);
    assert_eq!(IpvsMessage::parse_genl(genl(&bytes)).unwrap(), want);
    assert_eq!(want.to_genl_bytes(), genl(&bytes));
    assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), 0x305);
}

/// The kernel's dump answer for `-t 10.96.0.10:80 -s wrr` (after `ipvsadm -E ... -s wrr`).
const SERVICE_REPLY: &str = "
    40010000 1f00 0200 2c50026b 80004084    | nlmsghdr: len 320, MULTI
    01 01 0000                              | IPVS_CMD_NEW_SERVICE
    2c01 0100                               | IPVS_CMD_ATTR_SERVICE, no nested flag from the kernel
      0600 0100 0200 0000                   |   AF
      0600 0200 0600 0000                   |   PROTOCOL
      1400 0300 0a60000a 00000000 00000000 00000000 | ADDR
      0600 0400 0050 0000                   |   PORT
      0800 0600 77727200                    |   SCHED_NAME = \"wrr\\0\"
      0c00 0700 02000000 ffffffff           |   FLAGS = HASHED, mask ~0
      0800 0800 00000000                    |   TIMEOUT
      0800 0900 ffffffff                    |   NETMASK
      5c00 0a00                             |   STATS (32-bit)
        0800 0100 00000000  0800 0200 00000000  0800 0300 00000000
        0c00 0400 00000000 00000000  0c00 0500 00000000 00000000
        0800 0600 00000000  0800 0700 00000000  0800 0800 00000000
        0800 0900 00000000  0800 0a00 00000000
      7c00 0c00                             |   STATS64
        0c00 0100 0000000000000000  0c00 0200 0000000000000000
        0c00 0300 0000000000000000  0c00 0400 0000000000000000
        0c00 0500 0000000000000000  0c00 0600 0000000000000000
        0c00 0700 0000000000000000  0c00 0800 0000000000000000
        0c00 0900 0000000000000000  0c00 0a00 0000000000000000
";

#[test]
fn service_reply() {
    let bytes = unhex(SERVICE_REPLY);
    let key = ServiceKey::tcp(ip("10.96.0.10"), 80);
    let mut svc = Service::new(key, Scheduler::WeightedRoundRobin).with_flags(ServiceFlags::HASHED);
    svc.stats = Some(Stats::default());
    svc.stats64 = Some(Stats::default());
    let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
    let MessageAttr::Service(attrs) = &got.attrs[0] else {
        panic!()
    };
    assert_eq!(Service::from_attrs(attrs).unwrap(), svc);
    let want = IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(svc.to_attrs())],
    );
    assert_eq!(got, want);
    assert_eq!(unflag_nests(want.to_genl_bytes()), genl(&bytes));
}

/// The kernel's dump answer for the destination `10.244.0.2:8080 -m -w 2`.
const DEST_REPLY: &str = "
    64010000 1f00 0200 2c50026b 800000af    | nlmsghdr: len 356, MULTI
    05 01 0000                              | IPVS_CMD_NEW_DEST
    5001 0200                               | IPVS_CMD_ATTR_DEST
      1400 0100 0af40002 00000000 00000000 00000000 | ADDR = 10.244.0.2
      0600 0200 1f90 0000                   |   PORT = 8080
      0800 0300 00000000                    |   FWD_METHOD = MASQ
      0800 0400 02000000                    |   WEIGHT = 2
      0500 0d00 00 000000                   |   TUN_TYPE = IPIP
      0600 0e00 0000 0000                   |   TUN_PORT = 0
      0600 0f00 0000 0000                   |   TUN_FLAGS = 0
      0800 0500 00000000                    |   U_THRESH
      0800 0600 00000000                    |   L_THRESH
      0800 0700 00000000                    |   ACTIVE_CONNS
      0800 0800 00000000                    |   INACT_CONNS
      0800 0900 00000000                    |   PERSIST_CONNS
      0600 0b00 0200 0000                   |   ADDR_FAMILY = AF_INET
      5c00 0a00                             |   STATS
        0800 0100 00000000  0800 0200 00000000  0800 0300 00000000
        0c00 0400 00000000 00000000  0c00 0500 00000000 00000000
        0800 0600 00000000  0800 0700 00000000  0800 0800 00000000
        0800 0900 00000000  0800 0a00 00000000
      7c00 0c00                             |   STATS64
        0c00 0100 0000000000000000  0c00 0200 0000000000000000
        0c00 0300 0000000000000000  0c00 0400 0000000000000000
        0c00 0500 0000000000000000  0c00 0600 0000000000000000
        0c00 0700 0000000000000000  0c00 0800 0000000000000000
        0c00 0900 0000000000000000  0c00 0a00 0000000000000000
";

#[test]
fn destination_reply() {
    let bytes = unhex(DEST_REPLY);
    let mut dest =
        Destination::new(ip("10.244.0.2"), 8080, ForwardMethod::Masquerade).with_weight(2);
    dest.stats = Some(Stats::default());
    dest.stats64 = Some(Stats::default());
    let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
    let MessageAttr::Destination(attrs) = &got.attrs[0] else {
        panic!()
    };
    // the kernel's own order differs from a request's: the wire layer keeps it
    assert_eq!(
        attrs[..13],
        [
            DestinationAttr::Address(
                unhex("0af40002 000000000000000000000000")
                    .try_into()
                    .unwrap()
            ),
            DestinationAttr::Port(8080),
            DestinationAttr::ForwardMethod(0),
            DestinationAttr::Weight(2),
            DestinationAttr::TunnelType(0),
            DestinationAttr::TunnelPort(0),
            DestinationAttr::TunnelFlags(0),
            DestinationAttr::UpperThreshold(0),
            DestinationAttr::LowerThreshold(0),
            DestinationAttr::ActiveConnections(0),
            DestinationAttr::InactiveConnections(0),
            DestinationAttr::PersistentConnections(0),
            DestinationAttr::AddressFamily(2),
        ]
    );
    assert_eq!(
        Destination::from_attrs(attrs, AddressFamily::Inet).unwrap(),
        dest
    );
    assert_eq!(unflag_nests(got.to_genl_bytes()), genl(&bytes));
}

/// The kernel's answer to `IPVS_CMD_GET_INFO`: version 1.2.1, 4096 buckets.
const INFO_REPLY: &str = "
    24000000 1f00 0000 2a50026b 6a000051    | nlmsghdr
    0e 01 0000                              | IPVS_CMD_SET_INFO
    0800 0100 01020100                      | IPVS_INFO_ATTR_VERSION = 0x010201
    0800 0200 00100000                      | IPVS_INFO_ATTR_CONN_TAB_SIZE = 4096
";

#[test]
fn info_reply() {
    let bytes = unhex(INFO_REPLY);
    let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
    let info = Info::from_attrs(&got.attrs).unwrap();
    assert_eq!(
        info,
        Info {
            version: Version {
                major: 1,
                minor: 2,
                patch: 1
            },
            connection_table_size: 4096
        }
    );
    assert_eq!(info.version.to_string(), "1.2.1");
    let want = IpvsMessage::new(Command::SetInfo, info.to_attrs());
    assert_eq!(want.to_genl_bytes(), genl(&bytes));
}

/// `ipvsadm --set 100 20 30`
const SET_TIMEOUTS: &str = "
    2c000000 1f00 0500 2c50026b 7e004084    | nlmsghdr
    0c 01 0000                              | IPVS_CMD_SET_CONFIG
    0800 0400 64000000                      | TIMEOUT_TCP = 100
    0800 0500 14000000                      | TIMEOUT_TCP_FIN = 20
    0800 0600 1e000000                      | TIMEOUT_UDP = 30
";

#[test]
fn set_timeouts_request() {
    let bytes = unhex(SET_TIMEOUTS);
    let t = Timeouts {
        tcp: Duration::from_secs(100),
        tcp_fin: Duration::from_secs(20),
        udp: Duration::from_secs(30),
    };
    let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
    assert_eq!(Timeouts::from_attrs(&got.attrs), t);
    assert_eq!(
        IpvsMessage::new(Command::SetConfig, t.to_attrs()).to_genl_bytes(),
        genl(&bytes)
    );
}

/// `ipvsadm -A -t [2001:db8::1]:80 -s wlc -p 60 -M 64`: the IPv6 netmask is a prefix length.
const ADD_V6_SERVICE: &str = "
    68000000 1f00 0500 2b50026b 6f00c083
    01 01 0000
    5400 0180
      0600 0100 0a00 0000                   |   AF = AF_INET6
      0600 0200 0600 0000
      1400 0300 20010db8 00000000 00000000 00000001 | ADDR = 2001:db8::1
      0600 0400 0050 0000
      0800 0600 776c6300                    |   SCHED_NAME = \"wlc\\0\"
      0c00 0700 01000000 ffffffff           |   FLAGS = PERSISTENT
      0800 0800 3c000000                    |   TIMEOUT = 60
      0800 0900 40000000                    |   NETMASK = 64 (prefix length)
";

/// `ipvsadm -A -f 7 -s sh -b sh-fallback,sh-port -o`
const ADD_FWMARK_SERVICE: &str = "
    4c000000 1f00 0500 2b50026b 72008084
    01 01 0000
    3800 0180
      0600 0100 0200 0000                   |   AF = AF_INET
      0800 0500 07000000                    |   FWMARK = 7 (no protocol, address, port)
      0700 0600 736800 00                   |   SCHED_NAME = \"sh\\0\"
      0c00 0700 1c000000 ffffffff           |   FLAGS = ONEPACKET|SCHED1|SCHED2
      0800 0800 00000000
      0800 0900 ffffffff
";

#[test]
fn add_ipv6_and_fwmark_service_requests() {
    let v6 = fixtures::v6_service();
    let fw = fixtures::fwmark_service();
    for (hex, svc) in [(ADD_V6_SERVICE, v6), (ADD_FWMARK_SERVICE, fw)] {
        let bytes = unhex(hex);
        let got = IpvsMessage::parse_genl(genl(&bytes)).unwrap();
        let MessageAttr::Service(attrs) = &got.attrs[0] else {
            panic!()
        };
        assert_eq!(Service::from_attrs(attrs).unwrap(), svc);
        let want = IpvsMessage::new(
            Command::NewService,
            vec![MessageAttr::Service(svc.config_attrs())],
        );
        assert_eq!(want.to_genl_bytes(), genl(&bytes));
    }
}

/// Every vector, truncated anywhere, decodes to an error or a value, never a panic.
#[test]
fn truncated_vectors_are_errors_not_panics() {
    for hex in [
        ADD_SERVICE,
        ADD_TUNNEL_DEST,
        DUMP_DESTS,
        SERVICE_REPLY,
        DEST_REPLY,
        INFO_REPLY,
        SET_TIMEOUTS,
        ADD_V6_SERVICE,
        ADD_FWMARK_SERVICE,
    ] {
        let bytes = unhex(hex);
        let payload = genl(&bytes);
        assert!(IpvsMessage::parse_genl(payload).is_ok());
        for cut in 0..payload.len() {
            let _ = IpvsMessage::parse_genl(&payload[..cut]);
        }
        // cutting inside the first attribute's header or value is always an error
        assert!(IpvsMessage::parse_genl(&payload[..6]).is_err());
    }
}
