//! The socket: a netlink-proto connection carrying raw generic-netlink messages, and the
//! resolution of the `IPVS` family id through the generic-netlink controller.
//!
//! The connection carries bytes, not typed messages, on purpose: netlink-proto drops a
//! message it cannot decode, which would leave its request waiting forever. Typed decoding
//! happens in the handle, where a bad message becomes an [`Error::Decode`].

use std::convert::Infallible;
use std::io;

use netlink_packet_core::{
    Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkSerializable, ParseableParametrized,
};
use netlink_packet_generic::GenlMessage;
use netlink_packet_generic::constants::GENL_ID_CTRL;
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_sys::AsyncSocket;

use crate::message::FAMILY_NAME;
use crate::paced::DumpSocket;
use crate::{Error, Handle, Result};

/// One generic-netlink message as bytes: the netlink message type (the family id) and the
/// payload after the netlink header (`genlmsghdr` and attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawMessage {
    /// The netlink message type: the generic-netlink family id.
    pub message_type: u16,
    /// `genlmsghdr` followed by the attributes.
    pub payload: Vec<u8>,
}

impl NetlinkSerializable for RawMessage {
    fn message_type(&self) -> u16 {
        self.message_type
    }

    fn buffer_len(&self) -> usize {
        self.payload.len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.payload)
    }
}

impl NetlinkDeserializable for RawMessage {
    type Error = Infallible;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Infallible> {
        Ok(RawMessage {
            message_type: header.message_type,
            payload: payload.to_vec(),
        })
    }
}

/// The connection task: spawn it on a tokio runtime (its handles fail once it is dropped).
pub type Connection = netlink_proto::Connection<RawMessage>;

/// Receive buffer asked for; the kernel caps it at `net.core.rmem_max` and doubles it.
const RECEIVE_BUFFER: usize = 8 << 20;

/// The kernel's memory charge for one acknowledgement with `NETLINK_CAP_ACK` (an skb of
/// about 768 bytes), rounded up: batches are cut so their acks fit the receive buffer.
const ACK_TRUESIZE: usize = 1024;

/// Opens a generic-netlink socket for IPVS without resolving the family yet.
///
/// Spawn the [`Connection`] (`tokio::spawn(conn)`), then use the [`Handle`]; the family id
/// is resolved on first use. [`connect`] does both and resolves eagerly.
pub fn new_connection() -> io::Result<(Connection, Handle)> {
    let (mut conn, handle, _unsolicited) =
        netlink_proto::new_connection::<RawMessage>(netlink_sys::protocols::NETLINK_GENERIC)?;
    // Every ack reaches the handle: a batch matches each of its messages to its answer.
    conn.set_forward_ack(true);
    let socket = conn.socket_mut().socket_mut();
    // Acks then carry only the request's header, not the whole request back.
    socket.set_cap_ack(true)?;
    socket.set_ext_ack(true)?;
    socket.set_rx_buf_sz(RECEIVE_BUFFER)?;
    let receive_buffer = socket.get_rx_buf_sz()?;
    let batch_limit = (receive_buffer / ACK_TRUESIZE).clamp(16, 4096);
    // Beside the connection's socket, so in its network namespace.
    let dumps = DumpSocket::open()?;
    Ok((conn, Handle::new(handle, batch_limit, dumps)))
}

/// Opens a connection, spawns it on the current tokio runtime and resolves the `IPVS`
/// family: fails with [`Error::FamilyMissing`] when `ip_vs` is not loaded.
pub async fn connect() -> Result<Handle> {
    let (conn, handle) = new_connection()?;
    tokio::spawn(conn);
    handle.family_id().await?;
    Ok(handle)
}

/// The controller request for the family id (`CTRL_CMD_GETFAMILY`, `CTRL_ATTR_FAMILY_NAME`).
pub(crate) fn family_request() -> RawMessage {
    let mut msg = GenlMessage::from_payload(GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(FAMILY_NAME.to_string())],
    });
    msg.finalize();
    let mut payload = vec![0; Emitable::buffer_len(&msg)];
    msg.emit(&mut payload);
    RawMessage {
        message_type: GENL_ID_CTRL,
        payload,
    }
}

/// Reads the family id from the controller's answer.
pub(crate) fn family_reply(reply: &RawMessage) -> Result<u16> {
    let msg = GenlMessage::<GenlCtrl>::parse_with_param(&reply.payload[..], reply.message_type)?;
    msg.payload
        .nlas
        .iter()
        .find_map(|a| match a {
            GenlCtrlAttrs::FamilyId(id) => Some(*id),
            _ => None,
        })
        .ok_or_else(|| Error::UnexpectedReply("controller answer without a family id".into()))
}
