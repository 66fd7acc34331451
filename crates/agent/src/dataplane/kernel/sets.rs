//! The KUBE-* sets through libipset: reading them, applying the plan's set operations in
//! restore mode (on tokio's blocking pool or a worker thread), destroying one, and the conversions
//! between the model and the library.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Kernel;
use crate::dataplane::{Applied, Error};
use crate::model::kernel::sets::{self, SetName};
use crate::model::kernel::{Set, SetEntry, SetKind};
use crate::model::plan::Op;
use crate::model::snapshot::cluster::{Family, Protocol};

/// The agent's sets of `families`, read on the blocking pool (libipset waits on its netlink
/// socket).
pub(super) async fn observe_sets(families: Vec<Family>) -> Result<BTreeMap<SetName, Set>, Error> {
    super::blocking("sets", move || read_sets(&families)).await?
}

impl Kernel {
    /// Applies set operations on the blocking pool.
    pub(super) async fn apply_sets(&self, ops: &[(usize, &Op)], applied: &mut Applied) {
        let job = set_job(ops);
        let indices = job.indices();
        match super::blocking("sets", move || run_sets(job)).await {
            Ok(done) => applied.merge(done),
            Err(e) => {
                let e = Arc::new(e);
                applied
                    .failed
                    .extend(indices.into_iter().map(|i| (i, Error::Shared(e.clone()))));
            }
        }
    }
}

/// Reads the agent's sets of `families`.
fn read_sets(families: &[Family]) -> Result<BTreeMap<SetName, Set>, Error> {
    let mut session = ipset::Session::new().map_err(|e| ipset_error("open an ipset session", e))?;
    let mut out = BTreeMap::new();
    for family in families {
        for def in sets::ALL {
            let name = SetName::new(def, *family);
            let text = name.as_str();
            let set_name = ipset::SetName::new(text).map_err(|e| ipset_error(text, e))?;
            if session
                .header(&set_name)
                .map_err(|e| ipset_error(text, e))?
                .is_none()
            {
                continue;
            }
            let set = session
                .save_set(&set_name)
                .map_err(|e| ipset_error(text, e))?;
            let Some(kind) = set_kind(set.header.set_type) else {
                // A foreign type under one of our names: report it as a type we never use
                // so the plan leaves it alone and says so.
                out.insert(
                    name,
                    Set {
                        kind: SetKind::HashIp,
                        family: *family,
                        entries: Default::default(),
                    },
                );
                continue;
            };
            let entries = set
                .members
                .iter()
                .filter_map(|m| set_entry(&m.entry))
                .collect();
            out.insert(
                name,
                Set {
                    kind,
                    family: *family,
                    entries,
                },
            );
        }
    }
    Ok(out)
}

/// Destroys the set `name`.
pub(super) fn destroy(name: SetName) -> Result<(), Error> {
    let mut session = ipset::Session::new()?;
    session.destroy(&ipset::SetName::new(name.as_str())?)?;
    Ok(())
}

/// The plan's set operations, owned, for a thread of their own. An operation's entries are
/// shared with the plan, not copied (a cold sync's were 2.4 MiB at 10,000 Services).
pub(super) struct SetJob {
    /// The operations, with their indices in the plan.
    ops: Vec<(usize, Op)>,
}

impl SetJob {
    /// The operations' indices in the plan.
    pub(super) fn indices(&self) -> Vec<usize> {
        self.ops.iter().map(|(i, _)| *i).collect()
    }
}

pub(super) fn set_job(ops: &[(usize, &Op)]) -> SetJob {
    SetJob {
        ops: ops.iter().map(|(i, op)| (*i, (*op).clone())).collect(),
    }
}

/// How many entries are converted for libipset at a time. The library's form of an entry
/// (its set's name as a string, options) is several times the agent's: converted all at
/// once, a cold sync's entries were the largest thing the agent held beside the plan (28 MiB
/// at 50,000 Services). Each chunk still travels many entries per netlink message.
const CHUNK: usize = 4096;

/// Why a plan operation was not applied whole.
enum SetFailure {
    /// This operation failed; the others go on.
    Op(Error),
    /// The session failed: this operation and those after it are not applied.
    Session(Arc<Error>),
}

/// Applies set operations in libipset's restore mode, going on after a failed one.
pub(super) fn run_sets(job: SetJob) -> Applied {
    let mut applied = Applied::default();
    let mut session = match ipset::Session::new() {
        Ok(session) => session,
        Err(e) => {
            let e = Arc::new(Error::from(e));
            for (i, _) in job.ops {
                applied.failed.push((i, Error::Shared(e.clone())));
            }
            return applied;
        }
    };
    // Adding what exists and removing what is missing are not errors here: the agent
    // converges, it does not insist.
    session.set_exist(true);
    let mut sent = 0;
    let mut ops = job.ops.into_iter();
    while let Some((i, op)) = ops.next() {
        match apply_set_op(&mut session, &op, &mut sent) {
            Ok(()) => applied.done += 1,
            Err(SetFailure::Op(e)) => applied.failed.push((i, e)),
            Err(SetFailure::Session(e)) => {
                applied.failed.push((i, Error::Shared(e.clone())));
                for (i, _) in ops.by_ref() {
                    applied.failed.push((i, Error::Shared(e.clone())));
                }
            }
        }
    }
    applied.messages += sent.div_ceil(64).max(1);
    applied
}

/// One plan operation, its entries converted [`CHUNK`] at a time. An entry the library cannot
/// take fails the operation before any of it is applied.
fn apply_set_op(session: &mut ipset::Session, op: &Op, sent: &mut usize) -> Result<(), SetFailure> {
    let lib = |e: ipset::Error| SetFailure::Op(e.into());
    match op {
        Op::CreateSet(n) => apply_chunk(session, &[create_op(n).map_err(lib)?], sent),
        Op::AddEntries { set, entries } | Op::DelEntries { set, entries } => {
            let name = ipset::SetName::new(set.as_str()).map_err(lib)?;
            for e in entries.iter() {
                lib_entry(e, set).map_err(lib)?;
            }
            let add = matches!(op, Op::AddEntries { .. });
            let mut failed = None;
            for chunk in entries.chunks(CHUNK) {
                let chunk: Vec<ipset::Op> = chunk
                    .iter()
                    .map(|e| {
                        let e = lib_entry(e, set)?;
                        Ok(if add {
                            ipset::Op::add(&name, e)
                        } else {
                            ipset::Op::del(&name, e)
                        })
                    })
                    .collect::<Result<_, ipset::Error>>()
                    .map_err(lib)?;
                if let Err(e) = apply_chunk(session, &chunk, sent) {
                    match e {
                        SetFailure::Op(e) => {
                            failed.get_or_insert(e);
                        }
                        session_failure => return Err(session_failure),
                    }
                }
            }
            failed.map_or(Ok(()), |e| Err(SetFailure::Op(e)))
        }
        _ => Ok(()),
    }
}

/// Applies `ops`, going on after a failed one; the first failure is the chunk's.
fn apply_chunk(
    session: &mut ipset::Session,
    ops: &[ipset::Op],
    sent: &mut usize,
) -> Result<(), SetFailure> {
    *sent += ops.len();
    let mut failed = None;
    let mut start = 0;
    while start < ops.len() {
        match session.apply(&ops[start..]) {
            Ok(()) => break,
            Err(ipset::Error::Batch { index, source }) => {
                failed.get_or_insert_with(|| Error::Ipset(*source));
                start += index + 1;
            }
            Err(e) => return Err(SetFailure::Session(Arc::new(Error::from(e)))),
        }
    }
    failed.map_or(Ok(()), |e| Err(SetFailure::Op(e)))
}

fn set_kind(t: ipset::SetType) -> Option<SetKind> {
    Some(match t {
        ipset::SetType::HashIp => SetKind::HashIp,
        ipset::SetType::HashIpPort => SetKind::HashIpPort,
        ipset::SetType::HashIpPortIp => SetKind::HashIpPortIp,
        ipset::SetType::HashIpPortNet => SetKind::HashIpPortNet,
        ipset::SetType::BitmapPort => SetKind::BitmapPort,
        _ => return None,
    })
}

fn lib_protocol(p: Protocol) -> ipset::Protocol {
    match p {
        Protocol::Tcp => ipset::Protocol::Tcp,
        Protocol::Udp => ipset::Protocol::Udp,
        Protocol::Sctp => ipset::Protocol::Sctp,
    }
}

fn model_protocol(p: ipset::Protocol) -> Option<Protocol> {
    match p {
        ipset::Protocol::Tcp => Some(Protocol::Tcp),
        ipset::Protocol::Udp => Some(Protocol::Udp),
        ipset::Protocol::Sctp => Some(Protocol::Sctp),
        _ => None,
    }
}

fn set_entry(e: &ipset::Entry) -> Option<SetEntry> {
    Some(match *e {
        ipset::Entry::Ip(ip) => SetEntry::Ip(ip),
        ipset::Entry::IpPort { ip, protocol, port } => {
            SetEntry::IpPort(ip, model_protocol(protocol)?, port)
        }
        ipset::Entry::IpPortIp {
            ip,
            protocol,
            port,
            ip2,
        } => SetEntry::IpPortIp(ip, model_protocol(protocol)?, port, ip2),
        ipset::Entry::IpPortNet {
            ip,
            protocol,
            port,
            net,
        } => SetEntry::IpPortNet(
            ip,
            model_protocol(protocol)?,
            port,
            ipnet::IpNet::new(net.addr(), net.prefix()).ok()?,
        ),
        ipset::Entry::Port(p) => SetEntry::Port(p),
        _ => return None,
    })
}

fn lib_entry(e: &SetEntry, set: &SetName) -> Result<ipset::Entry, ipset::Error> {
    Ok(match *e {
        SetEntry::Ip(ip) => ipset::Entry::Ip(ip),
        SetEntry::IpPort(ip, p, port) => ipset::Entry::IpPort {
            ip,
            protocol: lib_protocol(p),
            port,
        },
        SetEntry::IpPortIp(ip, p, port, ip2) => ipset::Entry::IpPortIp {
            ip,
            protocol: lib_protocol(p),
            port,
            ip2,
        },
        SetEntry::IpPortNet(ip, p, port, net) => ipset::Entry::IpPortNet {
            ip,
            protocol: lib_protocol(p),
            port,
            net: ipset::Net::new(net.network(), net.prefix_len()).ok_or_else(|| {
                ipset::Error::Invalid {
                    set: set.to_string(),
                    reason: format!("bad network {net}"),
                }
            })?,
        },
        SetEntry::Port(p) => ipset::Entry::Port(p),
    })
}

/// The library's `create` of the set `n`, with its catalogue type and family.
fn create_op(n: &SetName) -> Result<ipset::Op, ipset::Error> {
    let set_name = ipset::SetName::new(n.as_str())?;
    let kind = n.kind();
    let fam = match n.family() {
        Family::V4 => ipset::Family::Inet,
        Family::V6 => ipset::Family::Inet6,
    };
    let header = match kind {
        SetKind::BitmapPort => ipset::Header::bitmap_port(set_name, 0, 65535),
        SetKind::HashIp => ipset::Header::hash(set_name, ipset::SetType::HashIp, fam),
        SetKind::HashIpPort => ipset::Header::hash(set_name, ipset::SetType::HashIpPort, fam),
        SetKind::HashIpPortIp => ipset::Header::hash(set_name, ipset::SetType::HashIpPortIp, fam),
        SetKind::HashIpPortNet => ipset::Header::hash(set_name, ipset::SetType::HashIpPortNet, fam),
    };
    let header = if kind == SetKind::BitmapPort {
        header
    } else {
        header.with_hashsize(1024).with_maxelem(65536)
    };
    Ok(ipset::Op::Create(header))
}

fn ipset_error(what: &str, e: ipset::Error) -> Error {
    Error::request(format!("ipset {what}"), e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::sets::named;

    #[test]
    fn a_set_job_shares_the_plans_entries() {
        let op = Op::AddEntries {
            set: named("KUBE-LOOP-BACK"),
            entries: vec![SetEntry::Port(30080), SetEntry::Port(30081)].into(),
        };
        let job = set_job(&[(3, &op)]);
        assert_eq!(job.indices(), [3]);
        let (
            Op::AddEntries {
                entries: theirs, ..
            },
            Op::AddEntries { entries: ours, .. },
        ) = (&job.ops[0].1, &op)
        else {
            panic!("{:?}", job.ops);
        };
        assert!(Arc::ptr_eq(theirs, ours));
    }
}
