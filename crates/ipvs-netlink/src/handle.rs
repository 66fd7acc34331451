//! The handle: sends requests over the connection and turns answers into typed results.

use std::future::ready;
use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_proto::ConnectionHandle;
use netlink_proto::sys::SocketAddr;
use tokio::sync::OnceCell;

use crate::batch::Batch;
use crate::connection::{RawMessage, family_reply, family_request};
use crate::daemon::DaemonHandle;
use crate::destination::DestinationHandle;
use crate::info::Info;
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::paced::{DumpSocket, PacedDump, SharedDumpSocket};
use crate::service::{ServiceHandle, ServiceKey};
use crate::timeout::TimeoutHandle;
use crate::{Error, Result};

/// A cheap, cloneable handle to an IPVS connection; the entry point of every request.
#[derive(Clone, Debug)]
pub struct Handle {
    conn: ConnectionHandle<RawMessage>,
    family: Arc<OnceCell<u16>>,
    batch_limit: usize,
    /// The socket of paced dumps, opened beside the connection's.
    dumps: SharedDumpSocket,
}

const ENOBUFS: i32 = 105;

impl Handle {
    pub(crate) fn new(
        conn: ConnectionHandle<RawMessage>,
        batch_limit: usize,
        dumps: DumpSocket,
    ) -> Self {
        Handle {
            conn,
            family: Arc::new(OnceCell::new()),
            batch_limit,
            dumps: Arc::new(tokio::sync::Mutex::new(dumps)),
        }
    }

    /// The `IPVS` family id, resolved once through the generic-netlink controller.
    /// [`Error::FamilyMissing`] means `ip_vs` is not loaded.
    pub async fn family_id(&self) -> Result<u16> {
        self.family
            .get_or_try_init(|| self.resolve_family())
            .await
            .copied()
    }

    async fn resolve_family(&self) -> Result<u16> {
        let mut answers = self.send(vec![with_flags(family_request(), NLM_F_REQUEST)])?;
        while let Some(m) = answers.next().await {
            match m.payload {
                NetlinkPayload::InnerMessage(raw) => return family_reply(&raw),
                NetlinkPayload::Error(e) => {
                    if let Some(code) = e.code {
                        let source = std::io::Error::from_raw_os_error(-code.get());
                        return Err(Error::FamilyMissing(source));
                    }
                }
                _ => {}
            }
        }
        Err(Error::ConnectionClosed)
    }

    /// How many requests one `sendmsg` of a [`Batch`] carries at most (their acks must fit
    /// the socket's receive buffer).
    pub fn batch_limit(&self) -> usize {
        self.batch_limit
    }

    /// Virtual services: `handle.services().add(&svc)`.
    pub fn services(&self) -> ServiceHandle {
        ServiceHandle::new(self.clone())
    }

    /// The destinations of the service `key`: `handle.destinations(&key).add(&dst)`.
    pub fn destinations(&self, key: &ServiceKey) -> DestinationHandle {
        DestinationHandle::new(self.clone(), *key)
    }

    /// Connection timeouts (`ipvsadm --set`, `ipvsadm -L --timeout`).
    pub fn timeouts(&self) -> TimeoutHandle {
        TimeoutHandle::new(self.clone())
    }

    /// Connection-synchronisation daemons (`ipvsadm --start-daemon`, ...).
    pub fn daemons(&self) -> DaemonHandle {
        DaemonHandle::new(self.clone())
    }

    /// A batch of requests sent together; see [`Batch`].
    pub fn batch(&self) -> Batch {
        Batch::new(self.clone())
    }

    /// IPVS version and connection table size (the header of `ipvsadm -L`).
    pub async fn info(&self) -> Result<Info> {
        let reply = self
            .query(IpvsMessage::new(Command::GetInfo, vec![]))
            .await?
            .ok_or_else(|| Error::UnexpectedReply("no answer to GET_INFO".into()))?;
        Info::from_attrs(&reply.attrs)
    }

    /// Zeroes the counters of every service and destination (`ipvsadm -Z`).
    pub async fn zero(&self) -> Result<()> {
        self.execute(zero_request(None)).await
    }

    /// Deletes every service and its destinations (`ipvsadm -C`).
    pub async fn flush(&self) -> Result<()> {
        self.execute(flush_request()).await
    }

    /// Sends one request with an ack and waits for it.
    pub async fn execute(&self, message: IpvsMessage) -> Result<()> {
        let family = self.family_id().await?;
        let mut answers = self.send(vec![encode(family, &message, NLM_F_REQUEST | NLM_F_ACK)])?;
        let mut result = Err(Error::ConnectionClosed);
        while let Some(m) = answers.next().await {
            match answer(m) {
                Ok(_) => result = Ok(()),
                Err(e) => return Err(e),
            }
        }
        result
    }

    /// Sends one request that the kernel answers with one message; a kernel "not found"
    /// becomes `Ok(None)`.
    pub async fn query(&self, message: IpvsMessage) -> Result<Option<IpvsMessage>> {
        let family = self.family_id().await?;
        let mut answers = self.send(vec![encode(family, &message, NLM_F_REQUEST)])?;
        while let Some(m) = answers.next().await {
            match answer(m) {
                Ok(Some(reply)) => return Ok(Some(reply)),
                Ok(None) => {}
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// [`Handle::dump`] on a socket of its own, each datagram read when the stream's consumer
    /// reaches it (see `paced`): for a long dump whose consumer keeps a part of each message.
    pub(crate) fn dump_paced(
        &self,
        message: IpvsMessage,
    ) -> impl Stream<Item = Result<IpvsMessage>> + use<> {
        let this = self.clone();
        stream::once(async move {
            let family = this.family_id().await?;
            PacedDump::start(this.dumps.clone(), family, &message).await
        })
        .map(|started| match started {
            Ok(dump) => dump.messages().left_stream(),
            Err(e) => stream::once(ready(Err(e))).right_stream(),
        })
        .flatten()
    }

    /// Sends a dump request and streams the kernel's messages.
    pub fn dump(&self, message: IpvsMessage) -> impl Stream<Item = Result<IpvsMessage>> + use<> {
        let this = self.clone();
        stream::once(async move {
            let family = this.family_id().await?;
            this.send(vec![encode(family, &message, NLM_F_REQUEST | NLM_F_DUMP)])
        })
        .map(|started| match started {
            Ok(answers) => answers
                .filter_map(|m| ready(answer(m).transpose()))
                .left_stream(),
            Err(e) => stream::once(ready(Err(e))).right_stream(),
        })
        .flatten()
    }

    /// Sends requests (already encoded, each with `NLM_F_ACK`) in one `sendmsg` and returns
    /// each one's result, in order.
    pub(crate) async fn send_acked(
        &self,
        messages: Vec<NetlinkMessage<RawMessage>>,
    ) -> Result<Vec<Result<()>>> {
        let n = messages.len();
        let mut answers = self.send(messages)?;
        let mut results = Vec::with_capacity(n);
        while let Some(m) = answers.next().await {
            let seq = m.header.sequence_number;
            match m.payload {
                NetlinkPayload::Error(e) => results.push((
                    seq,
                    match e.code {
                        None => Ok(()),
                        Some(code) => Err(Error::from_errno(-code.get())),
                    },
                )),
                NetlinkPayload::Overrun(_) => {
                    return Err(Error::Io(std::io::Error::from_raw_os_error(ENOBUFS)));
                }
                _ => {}
            }
        }
        if results.len() != n {
            return Err(Error::UnexpectedReply(format!(
                "{} answers to {n} batched requests",
                results.len()
            )));
        }
        // netlink-proto numbers a batch's messages consecutively, and each has one answer.
        results.sort_by_key(|(seq, _)| *seq);
        Ok(results.into_iter().map(|(_, r)| r).collect())
    }

    fn send(
        &self,
        messages: Vec<NetlinkMessage<RawMessage>>,
    ) -> Result<impl Stream<Item = NetlinkMessage<RawMessage>> + use<>> {
        self.conn
            .request_batch(messages, SocketAddr::new(0, 0))
            .map_err(|_| Error::ConnectionClosed)
    }
}

/// Wraps a raw message in a netlink message with `flags`.
pub(crate) fn with_flags(raw: RawMessage, flags: u16) -> NetlinkMessage<RawMessage> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    NetlinkMessage::new(header, NetlinkPayload::InnerMessage(raw))
}

/// Encodes an IPVS message for the family `family`.
pub(crate) fn encode(family: u16, message: &IpvsMessage, flags: u16) -> NetlinkMessage<RawMessage> {
    with_flags(
        RawMessage {
            message_type: family,
            payload: message.to_genl_bytes(),
        },
        flags,
    )
}

/// One answer: a decoded message, nothing (ack, end of dump), or the kernel's error.
fn answer(m: NetlinkMessage<RawMessage>) -> Result<Option<IpvsMessage>> {
    match m.payload {
        NetlinkPayload::InnerMessage(raw) => Ok(Some(IpvsMessage::parse_genl(&raw.payload)?)),
        NetlinkPayload::Error(e) => match e.code {
            None => Ok(None),
            Some(code) => Err(Error::from_errno(-code.get())),
        },
        NetlinkPayload::Done(done) if done.code < 0 => Err(Error::from_errno(-done.code)),
        NetlinkPayload::Overrun(_) => Err(Error::Io(std::io::Error::from_raw_os_error(ENOBUFS))),
        _ => Ok(None),
    }
}

/// `IPVS_CMD_ZERO`, for one service or (with `None`) for all.
pub(crate) fn zero_request(key: Option<&ServiceKey>) -> IpvsMessage {
    let attrs = key
        .map(|k| vec![MessageAttr::Service(k.to_attrs())])
        .unwrap_or_default();
    IpvsMessage::new(Command::Zero, attrs)
}

/// `IPVS_CMD_FLUSH`.
pub(crate) fn flush_request() -> IpvsMessage {
    IpvsMessage::new(Command::Flush, vec![])
}
