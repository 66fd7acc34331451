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
    socket: Arc<Mutex<TokioSocket>>,
}

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
            socket: Arc::new(Mutex::new(socket)),
        })
    }

    /// Sends the dump request `request` and gives each message of the answer to `take`, a
    /// datagram at a time. The dump is always read to its end (the kernel runs one dump per
    /// socket), also past a message that could not be decoded, whose error is returned then.
    pub async fn each(
        &self,
        what: &'static str,
        request: RouteNetlinkMessage,
        mut take: impl FnMut(RouteNetlinkMessage),
    ) -> Result<(), Error> {
        let io = |source| Error::Io { what, source };
        let socket = self.socket.lock().await;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = 1;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        socket.send(&bytes).await.map_err(io)?;
        let mut datagram = Vec::with_capacity(DATAGRAM);
        let mut undecoded = None;
        loop {
            datagram.clear();
            socket.recv(&mut datagram).await.map_err(io)?;
            let mut at = 0;
            while at < datagram.len() {
                let rest = &datagram[at..];
                let length = NetlinkBuffer::new_checked(rest)
                    .map(|b| b.length() as usize)
                    .ok()
                    .filter(|l| *l > 0)
                    .ok_or_else(|| io(std::io::Error::other("a truncated netlink message")))?;
                at += length.next_multiple_of(4);
                let payload = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest) {
                    Ok(message) => message.payload,
                    Err(e) => {
                        undecoded.get_or_insert(e);
                        continue;
                    }
                };
                match payload {
                    NetlinkPayload::InnerMessage(m) => take(m),
                    NetlinkPayload::Done(done) if done.code < 0 => {
                        return Err(io(std::io::Error::from_raw_os_error(-done.code)));
                    }
                    NetlinkPayload::Done(_) => {
                        return match undecoded {
                            None => Ok(()),
                            Some(e) => Err(io(std::io::Error::other(e.to_string()))),
                        };
                    }
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(code) => Err(io(std::io::Error::from_raw_os_error(-code.get()))),
                            None => Ok(()),
                        };
                    }
                    NetlinkPayload::Overrun(_) => {
                        return Err(io(std::io::Error::from_raw_os_error(libc::ENOBUFS)));
                    }
                    _ => {}
                }
            }
        }
    }
}
