//! rtnetlink dumps read a datagram at a time as they are taken in, on a socket of their own.
//!
//! netlink-proto's connection task (under rtnetlink) reads its socket until the socket would
//! block, and the kernel goes on with a dump inside each read, so a dump is received, decoded
//! and queued whole before its reader sees the first message: at every full pass, the 11,200
//! VIP addresses of N = 10,000, 2-3 MiB held at once for a list that keeps 24 bytes of each.
//! Here the next datagram is read only once the last one's messages are taken in. netlink-proto
//! has no flow control to ask for this, hence the few lines by hand (ipvs-netlink has its own
//! for IPVS listings, a library that stands alone).

use std::sync::Arc;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_sys::{AsyncSocket, AsyncSocketExt, SocketAddr, TokioSocket, protocols};
use rtnetlink::packet_route::RouteNetlinkMessage;
use tokio::sync::Mutex;

use super::Error;

/// A dump's datagram is at most 32 KiB (the kernel caps `max_recvmsg_len` there); a shorter
/// buffer would truncate it.
const DATAGRAM: usize = 64 << 10;

/// The socket paced dumps of one rtnetlink connection share, a dump at a time.
#[derive(Clone)]
pub struct PacedDumps {
    socket: Arc<Mutex<DumpSocket>>,
}

/// The socket, and whether a dump on it was started and not read to its end: by an error
/// (a failed read, a garbled message) or a caller that dropped it. The kernel runs one dump
/// per socket and answers the next request with EBUSY until that one ends, so it is read to
/// its end first.
struct DumpSocket {
    socket: TokioSocket,
    unfinished: bool,
}

/// `NLMSG_ERROR`, `NLMSG_DONE` and `NLMSG_OVERRUN`: a dump's last message is one of them.
const ENDS: [u16; 3] = [2, 3, 4];

impl PacedDumps {
    /// Opens the socket in the calling thread's network namespace (call it beside the
    /// connection it serves); with `strict`, `NETLINK_GET_STRICT_CHK`, so that the kernel
    /// filters a dump by what its request names (a route table, a protocol).
    pub fn open(strict: bool) -> Result<Self, Error> {
        let io = |source| Error::Io {
            what: "rtnetlink dump socket",
            source,
        };
        let mut socket = TokioSocket::new(protocols::NETLINK_ROUTE).map_err(io)?;
        socket.socket_mut().bind_auto().map_err(io)?;
        if strict {
            socket
                .socket_mut()
                .set_netlink_get_strict_chk(true)
                .map_err(io)?;
        }
        socket
            .socket_mut()
            .connect(&SocketAddr::new(0, 0))
            .map_err(io)?;
        Ok(PacedDumps {
            socket: Arc::new(Mutex::new(DumpSocket {
                socket,
                unfinished: false,
            })),
        })
    }

    /// Sends the dump request `request` and gives each message of the answer to `take`, a
    /// datagram at a time. A dump is read to its end also past a message that could not be
    /// decoded, whose error is returned then; one left unfinished (a failed read, a dropped
    /// future) is read to its end before the next request.
    pub async fn each(
        &self,
        what: &'static str,
        request: RouteNetlinkMessage,
        mut take: impl FnMut(RouteNetlinkMessage),
    ) -> Result<(), Error> {
        let io = |source| Error::Io { what, source };
        let mut guard = self.socket.lock().await;
        let state = &mut *guard;
        let mut datagram = Vec::with_capacity(DATAGRAM);
        if state.unfinished {
            drain(&state.socket, &mut datagram).await.map_err(io)?;
            state.unfinished = false;
        }
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = 1;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        state.socket.send(&bytes).await.map_err(io)?;
        state.unfinished = true;
        let mut undecoded = None;
        loop {
            datagram.clear();
            state.socket.recv(&mut datagram).await.map_err(io)?;
            if datagram.is_empty() {
                return Err(io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            let mut at = 0;
            while at < datagram.len() {
                let rest = &datagram[at..];
                let Some((length, kind)) = header_of(rest) else {
                    // The rest of this datagram cannot be split; the dump's end comes later.
                    undecoded.get_or_insert_with(|| "a truncated netlink message".to_string());
                    break;
                };
                at += length.next_multiple_of(4);
                if ENDS.contains(&kind) {
                    state.unfinished = false;
                }
                let payload = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest) {
                    Ok(message) => message.payload,
                    Err(e) => {
                        undecoded.get_or_insert_with(|| e.to_string());
                        continue;
                    }
                };
                match payload {
                    NetlinkPayload::InnerMessage(m) => take(m),
                    NetlinkPayload::Done(done) if done.code < 0 => {
                        return Err(io(std::io::Error::from_raw_os_error(-done.code)));
                    }
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            return Err(io(std::io::Error::from_raw_os_error(-code.get())));
                        }
                    }
                    NetlinkPayload::Overrun(_) => {
                        return Err(io(std::io::Error::from_raw_os_error(libc::ENOBUFS)));
                    }
                    _ => {}
                }
                if !state.unfinished {
                    return match undecoded {
                        None => Ok(()),
                        Some(e) => Err(io(std::io::Error::other(e))),
                    };
                }
            }
            if !state.unfinished {
                // An end the decoder could not read (a garbled NLMSG_DONE).
                return Err(io(std::io::Error::other(
                    undecoded.unwrap_or_else(|| "a dump's end".into()),
                )));
            }
        }
    }
}

/// A netlink message's length and type from its header; `None` if it is cut short.
fn header_of(bytes: &[u8]) -> Option<(usize, u16)> {
    let buffer = NetlinkBuffer::new_checked(bytes).ok()?;
    let length = buffer.length() as usize;
    (length > 0).then(|| (length, buffer.message_type()))
}

/// Reads an unfinished dump's datagrams, its messages unread, until the one that ends it.
async fn drain(socket: &TokioSocket, datagram: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        datagram.clear();
        socket.recv(datagram).await?;
        if datagram.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let mut at = 0;
        while let Some((length, kind)) = header_of(&datagram[at..]) {
            if ENDS.contains(&kind) {
                return Ok(());
            }
            at += length.next_multiple_of(4);
            if at >= datagram.len() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rtnetlink::packet_route::address::AddressMessage;
    use rtnetlink::packet_route::link::LinkMessage;

    use super::*;

    /// What `each` gives for one request: the kinds of the messages taken.
    async fn kinds(dumps: &PacedDumps, request: RouteNetlinkMessage) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        dumps
            .each("test dump", request, |m| {
                kinds.push(match m {
                    RouteNetlinkMessage::NewAddress(_) => "address",
                    RouteNetlinkMessage::NewLink(_) => "link",
                    _ => "other",
                })
            })
            .await
            .expect("the dump is read");
        kinds
    }

    /// A dump left unread (as a failed read or a dropped future leaves it) is read to its end
    /// before the next: its messages are not taken as the next dump's, and the kernel, which
    /// runs one dump per socket, does not refuse the next with EBUSY.
    #[tokio::test]
    async fn a_dump_left_unfinished_is_read_to_its_end_before_the_next() {
        let dumps = PacedDumps::open(false).expect("a NETLINK_ROUTE socket on the host");
        let addresses = RouteNetlinkMessage::GetAddress(AddressMessage::default());
        let clean = kinds(&dumps, addresses.clone()).await;
        assert!(!clean.is_empty() && clean.iter().all(|k| *k == "address"));
        {
            let mut state = dumps.socket.lock().await;
            let mut header = NetlinkHeader::default();
            header.flags = NLM_F_REQUEST | NLM_F_DUMP;
            let request = RouteNetlinkMessage::GetLink(LinkMessage::default());
            let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
            message.finalize();
            let mut bytes = vec![0; message.buffer_len()];
            message.serialize(&mut bytes);
            state
                .socket
                .send(&bytes)
                .await
                .expect("the link dump is asked for");
            state.unfinished = true;
        }
        assert_eq!(kinds(&dumps, addresses.clone()).await, clean);
        assert_eq!(kinds(&dumps, addresses).await, clean);
    }
}
