//! Dumps read at their consumer's pace, on a socket of their own.
//!
//! The connection task of netlink-proto reads its socket until the socket would block, and
//! the kernel goes on with a dump inside each read (`netlink_recvmsg` calls the dump again
//! once the socket's queue is half empty). So a dump on the shared connection is received,
//! decoded and queued whole before its consumer sees the first message: at 12,000 services,
//! 5 MiB held at once for a listing that keeps a fraction of it. A paced dump reads the next
//! datagram only when its consumer asks for a message beyond the last one read, so the kernel
//! produces the dump as it is consumed. netlink-proto has no flow control to ask for this,
//! hence the few lines by hand.
//!
//! Each connection opens its dump socket beside its own, so both are in the network namespace
//! the connection was opened in; paced dumps on one connection take turns, and one whose
//! consumer stopped early is read to its end before the next starts (the kernel runs one dump
//! per socket). Dumps of a few messages (a service's destinations) stay on the connection.

use std::sync::Arc;

use futures::{Stream, stream};
use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload};
use netlink_sys::{AsyncSocket, AsyncSocketExt, SocketAddr, TokioSocket, protocols};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::connection::RawMessage;
use crate::handle::encode;
use crate::message::IpvsMessage;
use crate::{Error, Result};

/// The receive buffer of one read: a dump's datagram is at most 32 KiB (the kernel caps
/// `max_recvmsg_len` there), and a shorter buffer would truncate it.
const DATAGRAM: usize = 64 << 10;

/// `ENOBUFS`: the socket overran.
const ENOBUFS: i32 = 105;

/// The socket paced dumps use, and what it read last.
pub(crate) struct DumpSocket {
    socket: TokioSocket,
    /// The last datagram read.
    datagram: Vec<u8>,
    /// Where its next message starts.
    at: usize,
    /// Whether a dump was started and not read to its end.
    unfinished: bool,
}

impl std::fmt::Debug for DumpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DumpSocket")
            .field("unfinished", &self.unfinished)
            .finish_non_exhaustive()
    }
}

impl DumpSocket {
    /// Opens one in the calling thread's network namespace (call it beside the connection).
    pub(crate) fn open() -> std::io::Result<Self> {
        let mut socket = TokioSocket::new(protocols::NETLINK_GENERIC)?;
        socket.socket_mut().bind_auto()?;
        socket.socket_mut().connect(&SocketAddr::new(0, 0))?;
        Ok(DumpSocket {
            socket,
            datagram: Vec::new(),
            at: 0,
            unfinished: false,
        })
    }
}

/// The socket paced dumps of one connection share, a dump at a time.
pub(crate) type SharedDumpSocket = Arc<Mutex<DumpSocket>>;

/// A dump under way on the connection's dump socket, which it holds until it is dropped.
pub(crate) struct PacedDump {
    socket: OwnedMutexGuard<DumpSocket>,
}

impl PacedDump {
    /// Waits for `socket`, reads what an earlier dump left to its end, and sends the dump
    /// request `message` of the family `family`.
    pub(crate) async fn start(
        socket: SharedDumpSocket,
        family: u16,
        message: &IpvsMessage,
    ) -> Result<Self> {
        let mut dump = PacedDump {
            socket: socket.lock_owned().await,
        };
        // A message that does not decode is skipped; a failed read ends the drain, and the
        // request is not sent (the kernel would refuse it with EBUSY while that dump runs).
        loop {
            match dump.next().await {
                Ok(None) => break,
                Ok(Some(_)) => {}
                Err(e @ (Error::Io(_) | Error::ConnectionClosed)) => return Err(e),
                Err(_) => {}
            }
        }
        let mut request = encode(family, message, NLM_F_REQUEST | NLM_F_DUMP);
        request.header.sequence_number = 1;
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        let s = &mut *dump.socket;
        s.datagram = Vec::with_capacity(DATAGRAM);
        s.at = 0;
        s.unfinished = true;
        s.socket.send(&bytes).await?;
        Ok(dump)
    }

    /// The dump's messages, each read when asked for.
    pub(crate) fn messages(self) -> impl Stream<Item = Result<IpvsMessage>> {
        stream::try_unfold(self, |mut dump| async move {
            Ok(dump.next().await?.map(|message| (message, dump)))
        })
    }

    /// The next message of the dump; `None` once the kernel ended it.
    async fn next(&mut self) -> Result<Option<IpvsMessage>> {
        let s = &mut *self.socket;
        while s.unfinished {
            if s.at >= s.datagram.len() {
                s.datagram.clear();
                s.at = 0;
                s.socket.recv(&mut s.datagram).await?;
                if s.datagram.is_empty() {
                    return Err(Error::ConnectionClosed);
                }
            }
            let message = match NetlinkMessage::<RawMessage>::deserialize(&s.datagram[s.at..]) {
                Ok(m) if m.header.length > 0 => m,
                // The rest of the datagram cannot be split into messages: skipped, so that
                // the dump goes on with the next datagram.
                garbled => {
                    s.at = s.datagram.len();
                    return Err(match garbled {
                        Ok(_) => Error::UnexpectedReply("a dump's message of length 0".into()),
                        Err(e) => e.into(),
                    });
                }
            };
            // Messages in a datagram are aligned to 4 bytes.
            s.at += (message.header.length as usize).next_multiple_of(4);
            match message.payload {
                NetlinkPayload::InnerMessage(raw) => {
                    return Ok(Some(IpvsMessage::parse_genl(&raw.payload)?));
                }
                NetlinkPayload::Done(done) => {
                    s.unfinished = false;
                    if done.code < 0 {
                        return Err(Error::from_errno(-done.code));
                    }
                }
                NetlinkPayload::Error(e) => {
                    s.unfinished = false;
                    if let Some(code) = e.code {
                        return Err(Error::from_errno(-code.get()));
                    }
                }
                NetlinkPayload::Overrun(_) => {
                    s.unfinished = false;
                    return Err(Error::Io(std::io::Error::from_raw_os_error(ENOBUFS)));
                }
                _ => {}
            }
        }
        // The datagram buffer is the dump's alone.
        s.datagram = Vec::new();
        Ok(None)
    }
}
