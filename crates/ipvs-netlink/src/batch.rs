//! Batching: many requests in one `sendmsg`, each with `NLM_F_ACK`, each one's answer
//! matched back by sequence number.
//!
//! The kernel handles a buffer's messages in order and queues one ack per message before
//! `sendmsg` returns, so a batch costs one system call and one wake-up instead of a round
//! trip per object. Batches are cut into chunks whose acks fit the socket's receive buffer
//! ([`Handle::batch_limit`]).

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_ACK, NLM_F_REQUEST};

use crate::destination::{self, Destination};
use crate::handle::{encode, flush_request, zero_request};
use crate::message::IpvsMessage;
use crate::service::{self, Service, ServiceKey};
use crate::timeout::{self, Timeouts};
use crate::{Error, Handle, Result};

/// Upper bound of one chunk's bytes, well below the default socket send buffer (208 KiB).
const CHUNK_BYTES: usize = 128 << 10;

/// What to do when the kernel refuses a request in a batch.
#[derive(Debug, Clone)]
enum Fallback {
    /// Report the error.
    None,
    /// On `EEXIST`, send this edit instead (in a follow-up round).
    UpdateOnExists(IpvsMessage),
    /// Treat "not found" as success.
    IgnoreMissing,
}

#[derive(Debug, Clone)]
struct Op {
    message: IpvsMessage,
    fallback: Fallback,
}

/// Requests queued to be sent together; from [`Handle::batch`].
///
/// Each queueing method returns the request's index in [`BatchOutcome::results`]. Requests
/// run in queue order, except the edits of `add_or_update_*` requests that found their
/// object: those run after the chunk that found it.
///
/// ```no_run
/// # async fn demo(handle: ipvs_netlink::Handle) -> ipvs_netlink::Result<()> {
/// use ipvs_netlink::{Destination, ForwardMethod, Scheduler, Service, ServiceKey};
/// let key = ServiceKey::tcp("10.96.0.10".parse().unwrap(), 80);
/// let mut batch = handle.batch();
/// batch.add_or_update_service(&Service::new(key, Scheduler::RoundRobin));
/// for ip in ["10.244.0.2", "10.244.0.3"] {
///     let dst = Destination::new(ip.parse().unwrap(), 8080, ForwardMethod::Masquerade);
///     batch.add_or_update_destination(&key, &dst);
/// }
/// batch.send().await?.check()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Batch {
    handle: Handle,
    ops: Vec<Op>,
}

impl Batch {
    pub(crate) fn new(handle: Handle) -> Self {
        Batch {
            handle,
            ops: Vec::new(),
        }
    }

    /// Requests queued.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    fn queue(&mut self, message: IpvsMessage, fallback: Fallback) -> usize {
        self.ops.push(Op { message, fallback });
        self.ops.len() - 1
    }

    /// Queues any request.
    pub fn push(&mut self, message: IpvsMessage) -> usize {
        self.queue(message, Fallback::None)
    }

    /// Queues `ipvsadm -A`.
    pub fn add_service(&mut self, svc: &Service) -> usize {
        self.queue(service::add_request(svc), Fallback::None)
    }

    /// Queues `ipvsadm -A`, and `-E` if the service exists.
    pub fn add_or_update_service(&mut self, svc: &Service) -> usize {
        self.queue(
            service::add_request(svc),
            Fallback::UpdateOnExists(service::set_request(svc)),
        )
    }

    /// Queues `ipvsadm -E`.
    pub fn set_service(&mut self, svc: &Service) -> usize {
        self.queue(service::set_request(svc), Fallback::None)
    }

    /// Queues `ipvsadm -D`.
    pub fn del_service(&mut self, key: &ServiceKey) -> usize {
        self.queue(service::del_request(key), Fallback::None)
    }

    /// Queues `ipvsadm -D`; a missing service counts as deleted.
    pub fn del_service_if_exists(&mut self, key: &ServiceKey) -> usize {
        self.queue(service::del_request(key), Fallback::IgnoreMissing)
    }

    /// Queues `ipvsadm -a`.
    pub fn add_destination(&mut self, key: &ServiceKey, dst: &Destination) -> usize {
        self.queue(destination::add_request(key, dst), Fallback::None)
    }

    /// Queues `ipvsadm -a`, and `-e` if the destination exists.
    pub fn add_or_update_destination(&mut self, key: &ServiceKey, dst: &Destination) -> usize {
        self.queue(
            destination::add_request(key, dst),
            Fallback::UpdateOnExists(destination::set_request(key, dst)),
        )
    }

    /// Queues `ipvsadm -e`.
    pub fn set_destination(&mut self, key: &ServiceKey, dst: &Destination) -> usize {
        self.queue(destination::set_request(key, dst), Fallback::None)
    }

    /// Queues `ipvsadm -d`.
    pub fn del_destination(&mut self, key: &ServiceKey, address: &IpAddr, port: u16) -> usize {
        self.queue(destination::del_request(key, address, port), Fallback::None)
    }

    /// Queues `ipvsadm -d`; a missing destination (or service) counts as deleted.
    pub fn del_destination_if_exists(
        &mut self,
        key: &ServiceKey,
        address: &IpAddr,
        port: u16,
    ) -> usize {
        self.queue(
            destination::del_request(key, address, port),
            Fallback::IgnoreMissing,
        )
    }

    /// Queues `ipvsadm --set`.
    pub fn set_timeouts(&mut self, timeouts: &Timeouts) -> usize {
        self.queue(timeout::set_request(timeouts), Fallback::None)
    }

    /// Queues `ipvsadm -Z` (all services with `None`).
    pub fn zero(&mut self, key: Option<&ServiceKey>) -> usize {
        self.queue(zero_request(key), Fallback::None)
    }

    /// Queues `ipvsadm -C`.
    pub fn flush(&mut self) -> usize {
        self.queue(flush_request(), Fallback::None)
    }

    /// Sends everything and collects each request's result. `Err` only when the socket or
    /// the connection fails; the kernel's refusals are in the outcome.
    pub async fn send(self) -> Result<BatchOutcome> {
        let n = self.ops.len();
        let mut results: Vec<Result<()>> = (0..n).map(|_| Ok(())).collect();
        if n == 0 {
            return Ok(BatchOutcome {
                results,
                sendmsgs: 0,
            });
        }
        let family = self.handle.family_id().await?;
        let limit = self.handle.batch_limit();
        let mut sendmsgs = 0;
        let mut retries = Vec::new();

        let first: Vec<(usize, &IpvsMessage)> =
            self.ops.iter().map(|op| &op.message).enumerate().collect();
        for chunk in chunks(&first, limit) {
            let answers = self.handle.send_acked(encode_all(family, chunk)).await?;
            sendmsgs += 1;
            for (&(index, _), answer) in chunk.iter().zip(answers) {
                match (answer, &self.ops[index].fallback) {
                    (Err(e), Fallback::UpdateOnExists(edit)) if e.is_exists() => {
                        retries.push((index, edit))
                    }
                    (Err(e), Fallback::IgnoreMissing) if e.is_not_found() => {}
                    (answer, _) => results[index] = answer,
                }
            }
        }
        for chunk in chunks(&retries, limit) {
            let answers = self.handle.send_acked(encode_all(family, chunk)).await?;
            sendmsgs += 1;
            for (&(index, _), answer) in chunk.iter().zip(answers) {
                results[index] = answer;
            }
        }
        Ok(BatchOutcome { results, sendmsgs })
    }
}

fn encode_all(
    family: u16,
    chunk: &[(usize, &IpvsMessage)],
) -> Vec<netlink_packet_core::NetlinkMessage<crate::connection::RawMessage>> {
    chunk
        .iter()
        .map(|(_, m)| encode(family, m, NLM_F_REQUEST | NLM_F_ACK))
        .collect()
}

/// Cuts `ops` into chunks of at most `limit` requests and about [`CHUNK_BYTES`] bytes.
fn chunks<'a, 'm>(
    ops: &'a [(usize, &'m IpvsMessage)],
    limit: usize,
) -> Vec<&'a [(usize, &'m IpvsMessage)]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, (_, m)) in ops.iter().enumerate() {
        // netlink header + genl header + attributes
        let len = 20 + netlink_packet_core::Emitable::buffer_len(*m);
        if i > start && (i - start >= limit || bytes + len > CHUNK_BYTES) {
            out.push(&ops[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += len;
    }
    if start < ops.len() {
        out.push(&ops[start..]);
    }
    out
}

/// Each batched request's result, in queue order.
#[derive(Debug)]
pub struct BatchOutcome {
    results: Vec<Result<()>>,
    sendmsgs: usize,
}

impl BatchOutcome {
    /// Results by queue index.
    pub fn results(&self) -> &[Result<()>] {
        &self.results
    }

    /// Takes the results.
    pub fn into_results(self) -> Vec<Result<()>> {
        self.results
    }

    /// The failed requests: (queue index, error).
    pub fn failures(&self) -> impl Iterator<Item = (usize, &Error)> {
        self.results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| (i, e)))
    }

    /// True when every request succeeded.
    pub fn is_ok(&self) -> bool {
        self.results.iter().all(Result::is_ok)
    }

    /// How many `sendmsg` calls the batch took.
    pub fn sendmsgs(&self) -> usize {
        self.sendmsgs
    }

    /// `Ok` if every request succeeded, else the first failure.
    pub fn check(self) -> Result<()> {
        self.results
            .into_iter()
            .find(Result::is_err)
            .unwrap_or(Ok(()))
    }
}
