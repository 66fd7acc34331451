//! The wire layer of a whole IPVS generic-netlink message: its command (`IPVS_CMD_*`) and
//! its top-level attributes (`IPVS_CMD_ATTR_*`, or `IPVS_INFO_ATTR_*` for the info commands).

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NLA_F_NESTED, Nla, NlaBuffer, NlasIterator, Parseable,
    ParseableParametrized,
};
use netlink_packet_generic::{GenlFamily, GenlHeader};

use crate::daemon::DaemonAttr;
use crate::destination::DestinationAttr;
use crate::nla::{emit_list, list_len, parse_list, parse_u32};
use crate::service::ServiceAttr;

/// The generic-netlink family name.
pub const FAMILY_NAME: &str = "IPVS";
/// The family's version (`IPVS_GENL_VERSION`).
pub const FAMILY_VERSION: u8 = 1;

/// An IPVS command (`IPVS_CMD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// `IPVS_CMD_NEW_SERVICE` (1): add a service; also the kernel's reply to service gets.
    NewService,
    /// `IPVS_CMD_SET_SERVICE` (2): edit a service.
    SetService,
    /// `IPVS_CMD_DEL_SERVICE` (3).
    DelService,
    /// `IPVS_CMD_GET_SERVICE` (4): get one, or dump all.
    GetService,
    /// `IPVS_CMD_NEW_DEST` (5): add a destination; also the kernel's dump reply.
    NewDest,
    /// `IPVS_CMD_SET_DEST` (6).
    SetDest,
    /// `IPVS_CMD_DEL_DEST` (7).
    DelDest,
    /// `IPVS_CMD_GET_DEST` (8): dump a service's destinations.
    GetDest,
    /// `IPVS_CMD_NEW_DAEMON` (9): start a sync daemon; also the kernel's dump reply.
    NewDaemon,
    /// `IPVS_CMD_DEL_DAEMON` (10).
    DelDaemon,
    /// `IPVS_CMD_GET_DAEMON` (11): dump the sync daemons.
    GetDaemon,
    /// `IPVS_CMD_SET_CONFIG` (12): set timeouts; also the reply to `GET_CONFIG`.
    SetConfig,
    /// `IPVS_CMD_GET_CONFIG` (13): get timeouts.
    GetConfig,
    /// `IPVS_CMD_SET_INFO` (14): the reply to `GET_INFO`.
    SetInfo,
    /// `IPVS_CMD_GET_INFO` (15): version and connection table size.
    GetInfo,
    /// `IPVS_CMD_ZERO` (16): zero counters.
    Zero,
    /// `IPVS_CMD_FLUSH` (17): delete every service.
    Flush,
    /// Another command number.
    Other(u8),
}

impl Command {
    /// The command number.
    pub fn to_raw(self) -> u8 {
        match self {
            Command::NewService => 1,
            Command::SetService => 2,
            Command::DelService => 3,
            Command::GetService => 4,
            Command::NewDest => 5,
            Command::SetDest => 6,
            Command::DelDest => 7,
            Command::GetDest => 8,
            Command::NewDaemon => 9,
            Command::DelDaemon => 10,
            Command::GetDaemon => 11,
            Command::SetConfig => 12,
            Command::GetConfig => 13,
            Command::SetInfo => 14,
            Command::GetInfo => 15,
            Command::Zero => 16,
            Command::Flush => 17,
            Command::Other(c) => c,
        }
    }

    /// From a command number.
    pub fn from_raw(c: u8) -> Self {
        match c {
            1 => Command::NewService,
            2 => Command::SetService,
            3 => Command::DelService,
            4 => Command::GetService,
            5 => Command::NewDest,
            6 => Command::SetDest,
            7 => Command::DelDest,
            8 => Command::GetDest,
            9 => Command::NewDaemon,
            10 => Command::DelDaemon,
            11 => Command::GetDaemon,
            12 => Command::SetConfig,
            13 => Command::GetConfig,
            14 => Command::SetInfo,
            15 => Command::GetInfo,
            16 => Command::Zero,
            17 => Command::Flush,
            other => Command::Other(other),
        }
    }

    /// Whether this command's top-level attributes are `IPVS_INFO_ATTR_*`.
    pub fn carries_info(self) -> bool {
        matches!(self, Command::SetInfo | Command::GetInfo)
    }
}

const CMD_ATTR_SERVICE: u16 = 1;
const CMD_ATTR_DEST: u16 = 2;
const CMD_ATTR_DAEMON: u16 = 3;
const CMD_ATTR_TIMEOUT_TCP: u16 = 4;
const CMD_ATTR_TIMEOUT_TCP_FIN: u16 = 5;
const CMD_ATTR_TIMEOUT_UDP: u16 = 6;
const INFO_ATTR_VERSION: u16 = 1;
const INFO_ATTR_CONN_TAB_SIZE: u16 = 2;

/// A top-level attribute of an IPVS message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageAttr {
    /// `IPVS_CMD_ATTR_SERVICE`: a nested service.
    Service(Vec<ServiceAttr>),
    /// `IPVS_CMD_ATTR_DEST`: a nested destination.
    Destination(Vec<DestinationAttr>),
    /// `IPVS_CMD_ATTR_DAEMON`: a nested sync daemon.
    Daemon(Vec<DaemonAttr>),
    /// `IPVS_CMD_ATTR_TIMEOUT_TCP` (u32 seconds).
    TimeoutTcp(u32),
    /// `IPVS_CMD_ATTR_TIMEOUT_TCP_FIN` (u32 seconds).
    TimeoutTcpFin(u32),
    /// `IPVS_CMD_ATTR_TIMEOUT_UDP` (u32 seconds).
    TimeoutUdp(u32),
    /// `IPVS_INFO_ATTR_VERSION` (u32, `major << 16 | minor << 8 | patch`), info commands only.
    Version(u32),
    /// `IPVS_INFO_ATTR_CONN_TAB_SIZE` (u32), info commands only.
    ConnTableSize(u32),
    /// An attribute this crate does not know, kept as is.
    Other(DefaultNla),
}

impl Nla for MessageAttr {
    fn value_len(&self) -> usize {
        match self {
            MessageAttr::Service(a) => list_len(a),
            MessageAttr::Destination(a) => list_len(a),
            MessageAttr::Daemon(a) => list_len(a),
            MessageAttr::TimeoutTcp(_)
            | MessageAttr::TimeoutTcpFin(_)
            | MessageAttr::TimeoutUdp(_)
            | MessageAttr::Version(_)
            | MessageAttr::ConnTableSize(_) => 4,
            MessageAttr::Other(o) => o.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            // ipvsadm (libnl) flags its nests; the kernel accepts both.
            MessageAttr::Service(_) => CMD_ATTR_SERVICE | NLA_F_NESTED,
            MessageAttr::Destination(_) => CMD_ATTR_DEST | NLA_F_NESTED,
            MessageAttr::Daemon(_) => CMD_ATTR_DAEMON | NLA_F_NESTED,
            MessageAttr::TimeoutTcp(_) => CMD_ATTR_TIMEOUT_TCP,
            MessageAttr::TimeoutTcpFin(_) => CMD_ATTR_TIMEOUT_TCP_FIN,
            MessageAttr::TimeoutUdp(_) => CMD_ATTR_TIMEOUT_UDP,
            MessageAttr::Version(_) => INFO_ATTR_VERSION,
            MessageAttr::ConnTableSize(_) => INFO_ATTR_CONN_TAB_SIZE,
            MessageAttr::Other(o) => o.kind(),
        }
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            MessageAttr::Service(a) => emit_list(a, buffer),
            MessageAttr::Destination(a) => emit_list(a, buffer),
            MessageAttr::Daemon(a) => emit_list(a, buffer),
            MessageAttr::TimeoutTcp(v)
            | MessageAttr::TimeoutTcpFin(v)
            | MessageAttr::TimeoutUdp(v)
            | MessageAttr::Version(v)
            | MessageAttr::ConnTableSize(v) => buffer.copy_from_slice(&v.to_ne_bytes()),
            MessageAttr::Other(o) => o.emit_value(buffer),
        }
    }
}

impl MessageAttr {
    /// Parses one top-level attribute of a message of command `command` (the info commands
    /// number their attributes differently).
    pub fn parse_for(buf: &NlaBuffer<&[u8]>, command: Command) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match (command.carries_info(), buf.kind()) {
            (true, INFO_ATTR_VERSION) => MessageAttr::Version(parse_u32(v, "version")?),
            (true, INFO_ATTR_CONN_TAB_SIZE) => {
                MessageAttr::ConnTableSize(parse_u32(v, "connection table size")?)
            }
            (true, _) => MessageAttr::Other(DefaultNla::parse(buf)?),
            (false, CMD_ATTR_SERVICE) => MessageAttr::Service(parse_list(v)?),
            (false, CMD_ATTR_DEST) => MessageAttr::Destination(parse_list(v)?),
            (false, CMD_ATTR_DAEMON) => MessageAttr::Daemon(parse_list(v)?),
            (false, CMD_ATTR_TIMEOUT_TCP) => MessageAttr::TimeoutTcp(parse_u32(v, "tcp timeout")?),
            (false, CMD_ATTR_TIMEOUT_TCP_FIN) => {
                MessageAttr::TimeoutTcpFin(parse_u32(v, "tcp fin timeout")?)
            }
            (false, CMD_ATTR_TIMEOUT_UDP) => MessageAttr::TimeoutUdp(parse_u32(v, "udp timeout")?),
            (false, _) => MessageAttr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// An IPVS message: the payload after the generic-netlink header.
///
/// It implements [`GenlFamily`], [`Emitable`] and [`ParseableParametrized`], so it also
/// works as `netlink_packet_generic::GenlMessage<IpvsMessage>` in other netlink stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsMessage {
    /// The command.
    pub command: Command,
    /// Its attributes, in order.
    pub attrs: Vec<MessageAttr>,
}

impl IpvsMessage {
    /// A message with `attrs`.
    pub fn new(command: Command, attrs: Vec<MessageAttr>) -> Self {
        IpvsMessage { command, attrs }
    }

    /// Parses the attributes after a generic-netlink header carrying `command`.
    pub fn parse_body(command: Command, body: &[u8]) -> Result<Self, DecodeError> {
        let attrs = NlasIterator::new(body)
            .map(|nla| MessageAttr::parse_for(&nla?, command))
            .collect::<Result<_, _>>()?;
        Ok(IpvsMessage { command, attrs })
    }

    /// Parses a whole generic-netlink payload: the 4-byte `genlmsghdr` and the attributes.
    pub fn parse_genl(payload: &[u8]) -> Result<Self, DecodeError> {
        let header = GenlHeader::parse(payload)?;
        Self::parse_with_param(&payload[4..], header)
    }

    /// The generic-netlink payload: `genlmsghdr` (command, version 1) and the attributes.
    pub fn to_genl_bytes(&self) -> Vec<u8> {
        let header = GenlHeader {
            cmd: self.command.to_raw(),
            version: FAMILY_VERSION,
        };
        let mut buf = vec![0; header.buffer_len() + self.buffer_len()];
        header.emit(&mut buf[..4]);
        self.emit(&mut buf[4..]);
        buf
    }
}

impl GenlFamily for IpvsMessage {
    fn family_name() -> &'static str {
        FAMILY_NAME
    }

    fn command(&self) -> u8 {
        self.command.to_raw()
    }

    fn version(&self) -> u8 {
        FAMILY_VERSION
    }
}

impl Emitable for IpvsMessage {
    fn buffer_len(&self) -> usize {
        list_len(&self.attrs)
    }

    fn emit(&self, buffer: &mut [u8]) {
        emit_list(&self.attrs, buffer)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for IpvsMessage {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        Self::parse_body(Command::from_raw(header.cmd), buf)
    }
}
