//! What the sync loop does when the kernel refuses: retry with exponential backoff, log each
//! distinct failure once (and once more when it ends), and tell "some objects failed" (the
//! agent stays healthy for what it could program) from "nothing can be programmed" (`/healthz`
//! says so).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::dataplane::Error;
use crate::model::kernel::VsKey;
use crate::model::plan::Op;

use super::Report;

/// Exponential backoff between retries of a failing sync: `base`, then twice as long after
/// each consecutive failing sync, at most `max`; back to `base` after a sync without failure.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// A backoff from `base` (at least 1 s) up to `max` (at least `base`).
    pub fn new(base: Duration, max: Duration) -> Self {
        let base = base.max(Duration::from_secs(1));
        Self {
            base,
            max: max.max(base),
            failures: 0,
        }
    }

    /// A sync failed: how long to wait before the next retry.
    pub fn failed(&mut self) -> Duration {
        let delay = self
            .base
            .saturating_mul(1u32 << self.failures.min(16))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// A sync had no failure: the next failure waits `base` again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failing syncs.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// The failures of one sync, as `(what, error)` pairs: each failed operation, or the error
/// that stopped the whole sync.
pub type Failures = Vec<(String, Explained)>;

/// How the failures of a sync compare with those of the previous one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FailureChanges {
    /// Failures not seen at the previous sync (or with another error): log them.
    pub new: Failures,
    /// Failures seen at the previous sync too, with the same error: already logged.
    pub repeated: usize,
    /// What failed at the previous sync and did not fail at this one.
    pub ended: Vec<String>,
}

/// Remembers the failures of the last sync, so that a failure retried at every sync is logged
/// once, not at every retry.
#[derive(Debug, Default)]
pub struct FailureLog {
    last: BTreeMap<String, Explained>,
}

impl FailureLog {
    /// Records the failures of a sync and says what changed since the previous one.
    pub fn update(&mut self, now: Failures) -> FailureChanges {
        let now: BTreeMap<String, Explained> = now.into_iter().collect();
        let mut changes = FailureChanges::default();
        for (what, error) in &now {
            if self.last.get(what) == Some(error) {
                changes.repeated += 1;
            } else {
                changes.new.push((what.clone(), error.clone()));
            }
        }
        changes.ended = self
            .last
            .keys()
            .filter(|w| !now.contains_key(*w))
            .cloned()
            .collect();
        self.last = now;
        changes
    }
}

/// The failed operations of a sync, as `(operation, error)` strings for the log, explained
/// where the kernel's answer alone is cryptic. The real servers of a virtual server that could
/// not be made are left out: their failure is that one.
pub fn failures(report: &Report) -> Failures {
    let failed: Vec<(&Op, &Error)> = report.applied.failures(&report.plan).collect();
    let missing: Vec<&VsKey> = failed
        .iter()
        .filter_map(|(op, _)| match op {
            Op::AddService { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    failed
        .iter()
        .filter(|(op, _)| match op {
            Op::AddDestination { key, .. } | Op::UpdateDestination { key, .. } => {
                !missing.contains(&key)
            }
            _ => true,
        })
        .map(|(op, e)| (failure_key(op), explain(op, e)))
        .collect()
}

/// What failed, named the same way at every retry: an operation's description, but for set
/// entries, whose count changes from one retry to the next, only the set.
fn failure_key(op: &Op) -> String {
    match op {
        Op::AddEntries { set, .. } => format!("add entries to {set}"),
        Op::DelEntries { set, .. } => format!("remove entries from {set}"),
        _ => op.to_string(),
    }
}

/// The kernel's (or the tool's) error for an operation, with what it means when that is not
/// obvious. The text is the log's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Explained {
    /// The error speaks for itself: its own text.
    #[error("{0}")]
    Plain(String),
    /// IPVS answered `ENOENT` to a virtual server: it cannot load the scheduler.
    #[error(
        "{error}: the kernel has no IPVS scheduler {scheduler:?} (is the module ip_vs_{scheduler} available?)"
    )]
    NoScheduler {
        /// The kernel's answer.
        error: String,
        /// The scheduler the virtual server asked for.
        scheduler: String,
    },
}

/// The kernel's error for `op`, with what it means when that is not obvious: IPVS answers
/// `ENOENT` to a virtual server whose scheduler it cannot load.
fn explain(op: &Op, error: &Error) -> Explained {
    match op {
        Op::AddService { service, .. } | Op::UpdateService { service, .. }
            if error.ipvs().and_then(ipvs_netlink::Error::errno) == Some(libc::ENOENT) =>
        {
            Explained::NoScheduler {
                error: error.to_string(),
                scheduler: service.scheduler.to_string(),
            }
        }
        _ => Explained::Plain(error.to_string()),
    }
}

/// Why nothing at all can be programmed; the text is the `reason` logged and shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocked {
    /// The rules could not be written.
    #[error("{op}: {why}")]
    Rules {
        /// The operation.
        op: String,
        /// The kernel's or the tool's answer, explained.
        why: Explained,
    },
    /// Every desired virtual server failed to be made.
    #[error("no virtual server could be made ({failed} of {desired} failed), e.g. {op}: {why}")]
    NoVirtualServer {
        /// How many creations failed.
        failed: usize,
        /// How many virtual servers are desired.
        desired: usize,
        /// The first failed operation.
        op: String,
        /// The kernel's answer to it, explained.
        why: Explained,
    },
    /// The sync itself failed: the kernel could not be read.
    #[error(transparent)]
    Sync(SyncError),
}

impl Blocked {
    /// The variant's name in kebab-case, a stable machine key for the log (`blocked=`),
    /// unlike the text.
    pub fn kind(&self) -> &'static str {
        match self {
            Blocked::Rules { .. } => "rules",
            Blocked::NoVirtualServer { .. } => "no-virtual-server",
            Blocked::Sync(_) => "sync",
        }
    }
}

/// The error that stopped a whole sync, shared; two are the same block when they read the
/// same (the loop logs a block once, until it changes).
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct SyncError(pub std::sync::Arc<Error>);

impl PartialEq for SyncError {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl Eq for SyncError {}

/// Why the agent cannot program the kernel at all after a sync that read it (`full`), or
/// `None` when it could program something: every desired virtual server is missing and its
/// creation failed, or the rules could not be written (for another reason than the xtables
/// lock held elsewhere). `desired` is the number of virtual servers the desired state holds.
pub fn cannot_program(report: &Report, desired: usize) -> Option<Blocked> {
    if report.applied.failed.is_empty() {
        return None;
    }
    let failed: Vec<(&Op, &Error)> = report.applied.failures(&report.plan).collect();
    // Another program holding the xtables lock past the wait is no reason to drain the node
    // at once: as in kube-proxy, the write is retried at the next sync, and `/healthz` turns
    // unhealthy only when a change has waited the health timeout.
    if let Some((op, e)) = failed.iter().find(|(op, e)| {
        matches!(op, Op::WriteRules { .. }) && !matches!(e, Error::XtablesLocked { .. })
    }) {
        return Some(Blocked::Rules {
            op: op.to_string(),
            why: explain(op, e),
        });
    }
    if !report.full || desired == 0 {
        return None;
    }
    let failed_adds: Vec<_> = failed
        .iter()
        .filter(|(op, _)| matches!(op, Op::AddService { .. }))
        .copied()
        .collect();
    if failed_adds.len() >= desired {
        let (op, e) = failed_adds[0];
        return Some(Blocked::NoVirtualServer {
            failed: failed_adds.len(),
            desired,
            op: op.to_string(),
            why: explain(op, e),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound_and_restarts_after_success() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let delays: Vec<u64> = (0..7).map(|_| b.failed().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(b.failures(), 7);
        b.succeeded();
        assert_eq!(b.failed(), Duration::from_secs(1));
    }

    #[test]
    fn backoff_never_waits_less_than_a_second_nor_overflows() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(b.failed(), Duration::from_secs(1));
        let mut b = Backoff::new(Duration::from_secs(1), Duration::MAX);
        for _ in 0..100 {
            b.failed();
        }
        assert_eq!(b.failed(), Duration::from_secs(1 << 16));
    }

    #[test]
    fn rules_another_program_keeps_locked_do_not_block_the_agent_but_other_failures_do() {
        use crate::model::kernel::Rules;
        use crate::model::plan::Plan;
        use crate::model::snapshot::cluster::Family;
        let report = |e: Error| Report {
            full: true,
            plan: Plan {
                ops: vec![Op::WriteRules {
                    family: Family::V4,
                    rules: Box::new(Rules::default()),
                    missing_jumps: Vec::new(),
                }],
                warnings: Vec::new(),
            },
            applied: crate::dataplane::Applied {
                failed: vec![(0, e)],
                ..Default::default()
            },
            ..Report::default()
        };
        let locked = report(Error::XtablesLocked {
            program: "iptables-legacy-restore".into(),
            message: "Another app is currently holding the xtables lock. Stopped waiting after 5s."
                .into(),
        });
        assert_eq!(cannot_program(&locked, 1), None);
        let tool = Error::Tool {
            program: "iptables-legacy-restore".into(),
            message: "line 3 failed".into(),
        };
        let why = Explained::Plain(tool.to_string());
        let refused = report(tool);
        let op = refused.plan.ops[0].to_string();
        assert_eq!(
            cannot_program(&refused, 1),
            Some(Blocked::Rules { op, why }),
            "the tool's own answer"
        );
    }

    #[test]
    fn only_enoent_from_ipvs_names_the_missing_scheduler() {
        use crate::model::kernel::{VirtualServer, VsKey};
        let op = Op::AddService {
            key: VsKey {
                address: "10.96.0.10".parse().unwrap(),
                protocol: crate::model::snapshot::cluster::Protocol::Tcp,
                port: 80,
            },
            service: Box::new(VirtualServer {
                scheduler: "lblc".into(),
                ..VirtualServer::default()
            }),
        };
        let no_scheduler = |e: &Error| Explained::NoScheduler {
            error: e.to_string(),
            scheduler: "lblc".into(),
        };
        let enoent = || Error::from(ipvs_netlink::Error::from_errno(libc::ENOENT));
        assert_eq!(explain(&op, &enoent()), no_scheduler(&enoent()));
        // Shared by a batch that could not be sent, it is the same answer.
        let shared = Error::Shared(std::sync::Arc::new(enoent()));
        assert_eq!(explain(&op, &shared), no_scheduler(&shared));
        // ESRCH is also "not found" to the library, but not the scheduler's answer.
        let esrch = Error::from(ipvs_netlink::Error::from_errno(libc::ESRCH));
        assert_eq!(explain(&op, &esrch), Explained::Plain(esrch.to_string()));
        let einval = Error::from(ipvs_netlink::Error::from_errno(libc::EINVAL));
        assert_eq!(explain(&op, &einval), Explained::Plain(einval.to_string()));
        // An ENOENT from anything but IPVS is not about schedulers.
        let sysctl = Error::Sysctl {
            key: "net/ipv4/vs/conntrack".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(explain(&op, &sysctl), Explained::Plain(sysctl.to_string()));
    }

    fn pair(what: &str, error: &str) -> (String, Explained) {
        (what.to_string(), Explained::Plain(error.to_string()))
    }

    #[test]
    fn a_failure_is_new_once_then_repeated_until_it_ends() {
        let mut log = FailureLog::default();
        let first = log.update(vec![pair("add a", "ENOENT"), pair("add b", "full")]);
        assert_eq!(first.new.len(), 2);
        let second = log.update(vec![pair("add a", "ENOENT"), pair("add b", "other")]);
        assert_eq!(second.new, vec![pair("add b", "other")]);
        assert_eq!(second.repeated, 1);
        assert!(second.ended.is_empty());
        let third = log.update(vec![pair("add b", "other")]);
        assert_eq!(third.ended, vec!["add a".to_string()]);
        assert!(third.new.is_empty());
        assert_eq!(log.update(Vec::new()).ended, vec!["add b".to_string()]);
    }
}
