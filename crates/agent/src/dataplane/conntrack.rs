//! Stale UDP conntrack entries, found and deleted over ctnetlink (`NETLINK_NETFILTER`), the
//! way kube-proxy's conntrack reconciler does it but without a `conntrack` process.
//!
//! One pass per family: dump the whole table (`IPCTNL_MSG_CT_GET` with `NLM_F_DUMP`, as
//! `conntrack -L -f ipv4` does), keep the UDP entries that a [`ConntrackFilter`] calls stale,
//! and delete each by its original tuple (`IPCTNL_MSG_CT_DELETE`, as `conntrack -D`), many
//! requests to one `send`, their acknowledgements read after. An entry gone in between
//! (`ENOENT`) is not an error. The socket is blocking and short-lived, so a pass runs on
//! tokio's blocking pool ([`clean`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use netlink_packet_core::{
    DecodeError, DefaultNla, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, Nla,
};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol as CtProtocol, Tuple,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_NETFILTER};
use tracing::debug;

use crate::model::desired::conntrack::ConntrackFilter;
use crate::model::snapshot::cluster::{Family, Protocol};

/// The first netlink message type that is not netlink's own (`NLMSG_MIN_TYPE`).
const NLMSG_MIN_TYPE: u16 = 0x10;
/// `NFNL_SUBSYS_CTNETLINK`: the high byte of a conntrack message's type.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
/// `CTA_ZONE`: the conntrack zone of an entry (absent means zone 0).
const CTA_ZONE: u16 = 18;
/// Delete requests per `send`: about 10 KiB of requests, well inside the socket's buffers.
const BATCH: usize = 100;
/// The receive buffer: a dump datagram holds up to 32 KiB.
const RECV_BUFFER: usize = 64 * 1024;

/// Errors of a conntrack pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The netlink socket could not be opened, or a send or receive failed.
    #[error("conntrack netlink socket: {0}")]
    Socket(#[source] io::Error),
    /// The kernel refused a request.
    #[error("conntrack {what}: {source}")]
    Kernel {
        /// The request (`dump` or `delete`).
        what: &'static str,
        /// The kernel's error number, as an I/O error.
        #[source]
        source: io::Error,
    },
    /// A reply could not be framed into netlink messages.
    #[error("conntrack {what}: undecodable reply")]
    Decode {
        /// The request (`dump` or `delete`).
        what: &'static str,
        /// What was wrong with it.
        #[source]
        source: DecodeError,
    },
    /// The blocking task that ran the pass did not finish.
    #[error("conntrack cleanup task: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// One conntrack entry, as much of it as the cleanup needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// The IP protocol number (17 for UDP).
    pub protocol: u8,
    /// The original direction's source.
    pub source: SocketAddr,
    /// The original direction's destination (a Service frontend, before NAT).
    pub destination: SocketAddr,
    /// The reply direction's source (the endpoint, after NAT).
    pub reply_source: SocketAddr,
    /// The conntrack zone.
    pub zone: u16,
}

impl Flow {
    /// The protocol, when it is one a Service can use.
    pub fn service_protocol(&self) -> Option<Protocol> {
        match CtProtocol::from(self.protocol) {
            CtProtocol::Tcp => Some(Protocol::Tcp),
            CtProtocol::Udp => Some(Protocol::Udp),
            CtProtocol::Sctp => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

/// What one pass over one family did (the `kubeproxy_conntrack_reconciler_*` metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// The family whose table was read.
    pub family: Family,
    /// Entries read.
    pub scanned: usize,
    /// Entries read that could not be decoded (skipped).
    pub undecoded: usize,
    /// Stale entries deleted.
    pub deleted: usize,
    /// Stale entries already gone when deleted.
    pub vanished: usize,
    /// How long the pass took.
    pub duration: Duration,
}

/// Deletes the stale entries of every family `filter` has frontends in, on the blocking pool.
pub async fn clean(filter: ConntrackFilter) -> Result<Vec<Cleaned>, Error> {
    tokio::task::spawn_blocking(move || clean_blocking(&filter))
        .await
        .map_err(Error::Task)?
}

/// [`clean`], on the calling thread.
pub fn clean_blocking(filter: &ConntrackFilter) -> Result<Vec<Cleaned>, Error> {
    let mut out = Vec::new();
    for family in filter.families() {
        let started = Instant::now();
        let mut ct = Ctnetlink::open()?;
        let (flows, undecoded) = ct.dump(family)?;
        let stale: Vec<Flow> = flows
            .iter()
            .filter(|f| {
                f.service_protocol()
                    .is_some_and(|p| filter.is_stale(p, f.destination, f.reply_source))
            })
            .copied()
            .collect();
        let (deleted, vanished) = ct.delete(family, &stale)?;
        let cleaned = Cleaned {
            family,
            scanned: flows.len(),
            undecoded,
            deleted,
            vanished,
            duration: started.elapsed(),
        };
        debug!(?cleaned, "conntrack reconciled");
        out.push(cleaned);
    }
    Ok(out)
}

/// A blocking ctnetlink socket.
pub struct Ctnetlink {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Ctnetlink {
    /// Opens a socket.
    pub fn open() -> Result<Ctnetlink, Error> {
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(Error::Socket)?;
        socket.bind_auto().map_err(Error::Socket)?;
        socket
            .connect(&NetlinkAddr::new(0, 0))
            .map_err(Error::Socket)?;
        Ok(Ctnetlink {
            socket,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUFFER),
        })
    }

    /// Every entry of `family`'s table, and how many entries could not be decoded.
    pub fn dump(&mut self, family: Family) -> Result<(Vec<Flow>, usize), Error> {
        self.seq = self.seq.wrapping_add(1);
        let request = request(
            family,
            ConntrackMessage::Get(vec![]),
            NLM_F_REQUEST | NLM_F_DUMP,
            self.seq,
        );
        self.socket.send(&request, 0).map_err(Error::Socket)?;
        let mut flows = Vec::new();
        let mut undecoded = 0;
        loop {
            self.receive()?;
            for message in Messages::new(&self.buf) {
                let message = message.map_err(|source| Error::Decode {
                    what: "dump",
                    source,
                })?;
                match message {
                    Reply::Done => return Ok((flows, undecoded)),
                    Reply::Error(code) => {
                        return Err(Error::Kernel {
                            what: "dump",
                            source: io::Error::from_raw_os_error(-code),
                        });
                    }
                    Reply::Ack(_) | Reply::Other(_) => {}
                    Reply::Entry(Some(flow)) => flows.push(flow),
                    Reply::Entry(None) => undecoded += 1,
                }
            }
        }
    }

    /// Deletes `flows` of `family` by their original tuples; returns how many were deleted
    /// and how many were already gone.
    pub fn delete(&mut self, family: Family, flows: &[Flow]) -> Result<(usize, usize), Error> {
        let (mut deleted, mut vanished) = (0, 0);
        for batch in flows.chunks(BATCH) {
            let mut buf = Vec::new();
            let first = self.seq.wrapping_add(1);
            for flow in batch {
                self.seq = self.seq.wrapping_add(1);
                buf.extend(request(
                    family,
                    ConntrackMessage::Delete(delete_attributes(flow)),
                    NLM_F_REQUEST | NLM_F_ACK,
                    self.seq,
                ));
            }
            self.socket.send(&buf, 0).map_err(Error::Socket)?;
            let mut pending = batch.len();
            let mut refused = None;
            while pending > 0 {
                self.receive()?;
                for message in Messages::new(&self.buf) {
                    let message = message.map_err(|source| Error::Decode {
                        what: "delete",
                        source,
                    })?;
                    let code = match message {
                        Reply::Ack(seq) if seq.wrapping_sub(first) < batch.len() as u32 => 0,
                        Reply::Error(code) => code,
                        // Not an answer to this batch.
                        _ => continue,
                    };
                    pending = pending.saturating_sub(1);
                    match code {
                        0 => deleted += 1,
                        c if c == -libc::ENOENT => vanished += 1,
                        c => refused = Some(c),
                    }
                }
            }
            if let Some(code) = refused {
                return Err(Error::Kernel {
                    what: "delete",
                    source: io::Error::from_raw_os_error(-code),
                });
            }
        }
        Ok((deleted, vanished))
    }

    fn receive(&mut self) -> Result<(), Error> {
        self.buf.clear();
        self.socket
            .recv(&mut self.buf, 0)
            .map_err(Error::Socket)
            .map(drop)
    }
}

/// One netlink request for the conntrack subsystem, serialized.
fn request(family: Family, message: ConntrackMessage, flags: u16, seq: u32) -> Vec<u8> {
    let family = match family {
        Family::V4 => NetfilterProtoFamily::IPv4,
        Family::V6 => NetfilterProtoFamily::IPv6,
    };
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut message = NetlinkMessage::new(
        header,
        NetlinkPayload::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            message,
        )),
    );
    message.finalize();
    let mut buf = vec![0; message.buffer_len()];
    message.serialize(&mut buf);
    buf
}

/// The attributes of a delete request: the original tuple, and the zone when not 0.
fn delete_attributes(flow: &Flow) -> Vec<ConntrackAttribute> {
    let mut attributes = vec![ConntrackAttribute::CtaTupleOrig(vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(flow.source.ip()),
            IPTuple::DestinationAddress(flow.destination.ip()),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(CtProtocol::from(flow.protocol)),
            ProtoTuple::SourcePort(flow.source.port()),
            ProtoTuple::DestinationPort(flow.destination.port()),
        ]),
    ])];
    if flow.zone != 0 {
        attributes.push(ConntrackAttribute::Other(DefaultNla::new(
            CTA_ZONE,
            flow.zone.to_be_bytes().to_vec(),
        )));
    }
    attributes
}

/// The parts of one tuple.
#[derive(Default)]
struct Parts {
    source: Option<IpAddr>,
    destination: Option<IpAddr>,
    protocol: Option<u8>,
    source_port: Option<u16>,
    destination_port: Option<u16>,
}

impl Parts {
    fn of(tuple: &[Tuple]) -> Parts {
        let mut p = Parts::default();
        for t in tuple {
            match t {
                Tuple::Ip(ips) => {
                    for ip in ips {
                        match ip {
                            IPTuple::SourceAddress(a) => p.source = Some(*a),
                            IPTuple::DestinationAddress(a) => p.destination = Some(*a),
                            _ => {}
                        }
                    }
                }
                Tuple::Proto(protos) => {
                    for proto in protos {
                        match proto {
                            ProtoTuple::Protocol(n) => p.protocol = Some(u8::from(*n)),
                            ProtoTuple::SourcePort(n) => p.source_port = Some(*n),
                            ProtoTuple::DestinationPort(n) => p.destination_port = Some(*n),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        p
    }
}

/// A flow from the attributes of a dumped entry; `None` when a part it needs is missing
/// (ICMP has no ports: such entries are never Service flows).
fn flow(attributes: &[ConntrackAttribute]) -> Option<Flow> {
    let (mut original, mut reply, mut zone) = (None, None, 0);
    for a in attributes {
        match a {
            ConntrackAttribute::CtaTupleOrig(t) => original = Some(Parts::of(t)),
            ConntrackAttribute::CtaTupleReply(t) => reply = Some(Parts::of(t)),
            ConntrackAttribute::Other(nla) if nla.kind() == CTA_ZONE => {
                let mut value = vec![0; nla.value_len()];
                nla.emit_value(&mut value);
                if let Ok(bytes) = <[u8; 2]>::try_from(value.as_slice()) {
                    zone = u16::from_be_bytes(bytes);
                }
            }
            _ => {}
        }
    }
    let (o, r) = (original?, reply?);
    Some(Flow {
        protocol: o.protocol?,
        source: SocketAddr::new(o.source?, o.source_port?),
        destination: SocketAddr::new(o.destination?, o.destination_port?),
        reply_source: SocketAddr::new(r.source?, r.source_port?),
        zone,
    })
}

/// One message of a ctnetlink reply, as [`replies`] decodes it.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// The end of a dump.
    Done,
    /// An acknowledgement of the request with this sequence number.
    Ack(u32),
    /// A refusal, with the kernel's negative error number.
    Error(i32),
    /// A conntrack entry (`None` when it could not be decoded).
    Entry(Option<Flow>),
    /// A message of another netfilter subsystem or netlink type, with its type, left
    /// undecoded (a ctnetlink socket is not sent any).
    Other(u16),
}

/// Decodes the messages of one datagram received on a ctnetlink socket, as a dump or a
/// delete reads them. A message whose netlink framing is broken ends the iteration with an
/// error; an entry whose attributes are garbled is a [`Reply::Entry`] of `None`, a message of
/// another netfilter subsystem a [`Reply::Other`], decoded no further. No input
/// makes it panic (the fuzz target `ctnetlink` and the agent's `fuzz_regressions` test feed
/// it arbitrary bytes).
pub fn replies(datagram: &[u8]) -> impl Iterator<Item = Result<Reply, DecodeError>> + '_ {
    Messages::new(datagram)
}

/// The messages of one received datagram: the iterator behind [`replies`].
struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Messages<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Messages { rest: buf }
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<Reply, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let framed =
            netlink_packet_core::NetlinkBuffer::new_checked(self.rest).map(|b| b.length() as usize);
        let length = match framed {
            Ok(n) if n >= 16 => n,
            Ok(n) => {
                self.rest = &[];
                return Some(Err(DecodeError::from(format!(
                    "netlink message of {n} bytes"
                ))));
            }
            Err(e) => {
                self.rest = &[];
                return Some(Err(e));
            }
        };
        let (this, rest) = self.rest.split_at(length);
        // Messages are 4-byte aligned.
        self.rest = rest
            .get(this.len().next_multiple_of(4) - this.len()..)
            .unwrap_or(&[]);
        let header = netlink_packet_core::NetlinkBuffer::new(this);
        let (seq, message_type) = (header.sequence_number(), header.message_type());
        // Only netlink's own messages and ctnetlink's are handed to the parser: the
        // netfilter crate's parsers of other subsystems (nftables sets, for one) panic on
        // malformed attributes, and a ctnetlink socket has no use for them.
        if message_type >= NLMSG_MIN_TYPE && message_type >> 8 != NFNL_SUBSYS_CTNETLINK {
            return Some(Ok(Reply::Other(message_type)));
        }
        Some(Ok(
            match NetlinkMessage::<NetfilterMessage>::deserialize(this) {
                Ok(m) => match m.payload {
                    NetlinkPayload::Done(_) => Reply::Done,
                    NetlinkPayload::Error(e) => match e.code {
                        None => Reply::Ack(seq),
                        Some(code) => Reply::Error(code.get()),
                    },
                    NetlinkPayload::InnerMessage(NetfilterMessage {
                        inner:
                            netlink_packet_netfilter::NetfilterMessageInner::Conntrack(
                                ConntrackMessage::New(a) | ConntrackMessage::Get(a),
                            ),
                        ..
                    }) => Reply::Entry(flow(&a)),
                    _ => Reply::Entry(None),
                },
                Err(_) => Reply::Entry(None),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_flow() -> Flow {
        Flow {
            protocol: 17,
            source: "10.244.0.9:40000".parse().unwrap(),
            destination: "10.96.0.10:53".parse().unwrap(),
            reply_source: "10.244.0.2:5353".parse().unwrap(),
            zone: 0,
        }
    }

    /// A dumped entry as the kernel sends it: both tuples, status, timeout, zone.
    fn entry(flow: &Flow, seq: u32) -> Vec<u8> {
        let tuple = |src: SocketAddr, dst: SocketAddr| {
            vec![
                Tuple::Ip(vec![
                    IPTuple::SourceAddress(src.ip()),
                    IPTuple::DestinationAddress(dst.ip()),
                ]),
                Tuple::Proto(vec![
                    ProtoTuple::Protocol(CtProtocol::from(flow.protocol)),
                    ProtoTuple::SourcePort(src.port()),
                    ProtoTuple::DestinationPort(dst.port()),
                ]),
            ]
        };
        let mut attributes = vec![
            ConntrackAttribute::CtaTupleOrig(tuple(flow.source, flow.destination)),
            ConntrackAttribute::CtaTupleReply(tuple(flow.reply_source, flow.source)),
            ConntrackAttribute::CtaTimeout(30),
        ];
        if flow.zone != 0 {
            attributes.push(ConntrackAttribute::Other(DefaultNla::new(
                CTA_ZONE,
                flow.zone.to_be_bytes().to_vec(),
            )));
        }
        request(
            Family::of(&flow.source.ip()),
            ConntrackMessage::New(attributes),
            NLM_F_REQUEST,
            seq,
        )
    }

    fn done() -> Vec<u8> {
        // nlmsghdr (16 bytes: length 20, type NLMSG_DONE, flags NLM_F_MULTI) and a 0 status.
        let mut b = vec![20, 0, 0, 0, 3, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        b.extend([0; 4]);
        b
    }

    #[test]
    fn a_dump_datagram_gives_its_flows_then_done() {
        let v6 = Flow {
            source: "[fd00::9]:40000".parse().unwrap(),
            destination: "[fd00::10]:53".parse().unwrap(),
            reply_source: "[fd00:244::2]:5353".parse().unwrap(),
            zone: 7,
            ..udp_flow()
        };
        let mut buf = entry(&udp_flow(), 1);
        buf.extend(entry(&v6, 1));
        buf.extend(done());
        let replies: Vec<_> = Messages::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            replies,
            [
                Reply::Entry(Some(udp_flow())),
                Reply::Entry(Some(v6)),
                Reply::Done
            ]
        );
        assert_eq!(udp_flow().service_protocol(), Some(Protocol::Udp));
    }

    #[test]
    fn a_delete_request_names_the_original_tuple_and_zone() {
        let flow = Flow {
            zone: 3,
            ..udp_flow()
        };
        let buf = request(
            Family::V4,
            ConntrackMessage::Delete(delete_attributes(&flow)),
            NLM_F_REQUEST | NLM_F_ACK,
            9,
        );
        // nlmsghdr: type IPCTNL_MSG_CT_DELETE of subsystem 1 (0x0102), flags REQUEST|ACK.
        assert_eq!(&buf[4..8], &[0x02, 0x01, 0x05, 0x00]);
        assert_eq!(&buf[8..12], &9u32.to_ne_bytes());
        // nfgenmsg: AF_INET, version 0, res_id 0.
        assert_eq!(&buf[16..20], &[2, 0, 0, 0]);
        let m = NetlinkMessage::<NetfilterMessage>::deserialize(&buf).unwrap();
        let NetlinkPayload::InnerMessage(NetfilterMessage {
            inner:
                netlink_packet_netfilter::NetfilterMessageInner::Conntrack(ConntrackMessage::Delete(a)),
            ..
        }) = m.payload
        else {
            panic!("{m:?}")
        };
        assert_eq!(a, delete_attributes(&flow));
        assert!(matches!(&a[1], ConntrackAttribute::Other(n) if n.kind() == CTA_ZONE));
    }

    #[test]
    fn acks_and_refusals_carry_their_sequence_and_code() {
        // NLMSG_ERROR with error 0 (an ack) for seq 5, then -ENOENT for seq 6; each quotes
        // the 16-byte header of the request.
        let error = |code: i32, seq: u32| {
            let mut b = 36u32.to_ne_bytes().to_vec();
            b.extend(2u16.to_ne_bytes());
            b.extend(0u16.to_ne_bytes());
            b.extend(seq.to_ne_bytes());
            b.extend(0u32.to_ne_bytes());
            b.extend(code.to_ne_bytes());
            b.extend([0; 16]);
            b
        };
        let mut buf = error(0, 5);
        buf.extend(error(-libc::ENOENT, 6));
        let replies: Vec<_> = Messages::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(replies, [Reply::Ack(5), Reply::Error(-libc::ENOENT)]);
    }

    #[test]
    fn messages_of_other_netfilter_subsystems_are_left_undecoded() {
        // An nftables NEWSET (type 0x0a0a) with an attribute shorter than its header: the
        // netfilter crate's nftables parser panics on such (found by the fuzz target
        // `ctnetlink`), so it must never see it.
        let mut bytes = Vec::new();
        bytes.extend(24u32.to_ne_bytes());
        bytes.extend(0x0a0au16.to_ne_bytes());
        bytes.extend([0; 10]);
        bytes.extend([2, 0, 0, 0, 2, 0, 1, 0]);
        bytes.extend(done());
        let got: Vec<_> = replies(&bytes).collect();
        assert!(
            matches!(got.as_slice(), [Ok(Reply::Other(0x0a0a)), Ok(Reply::Done)]),
            "{got:?}"
        );
    }

    #[test]
    fn garbled_replies_are_errors_or_skipped_entries_never_panics() {
        let mut good = entry(&udp_flow(), 1);
        good.extend(done());
        // Every truncation and every single-byte corruption of a valid datagram.
        for cut in 0..good.len() {
            let _ = Messages::new(&good[..cut]).count();
        }
        for at in 0..good.len() {
            for value in [0u8, 0x01, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[at] = value;
                let _ = Messages::new(&bad).count();
            }
        }
        // A zero length must not loop forever.
        let zero = [0u8; 16];
        assert!(matches!(
            Messages::new(&zero).collect::<Vec<_>>().as_slice(),
            [Err(_)]
        ));
        // An entry cut at an attribute boundary is still one entry.
        let mut icmp = udp_flow();
        icmp.protocol = 1;
        let mut bytes = entry(&icmp, 1);
        // Drop the last attribute (the timeout) and fix the length.
        let len = bytes.len() - 8;
        bytes.truncate(len);
        bytes[..4].copy_from_slice(&(len as u32).to_ne_bytes());
        let replies: Vec<_> = Messages::new(&bytes).collect();
        assert!(
            matches!(replies.as_slice(), [Ok(Reply::Entry(_))]),
            "{replies:?}"
        );
    }
}
