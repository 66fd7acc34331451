//! The health state shared between the sync loop, the Node watch and the servers, on the
//! system clock.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::ProxyHealth;
use crate::model::plan::Op;
use crate::model::snapshot::cluster::Family;
use crate::sync::Report;

/// system clock.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<Mutex<ProxyHealth>>,
    families: Vec<Family>,
}

impl Health {
    /// Health for the agent's `families` with kube-proxy's timeout (2 × sync period).
    pub fn new(families: &[Family], timeout: Duration) -> Self {
        Self {
            state: Arc::new(Mutex::new(ProxyHealth::new(timeout))),
            families: families.to_vec(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ProxyHealth> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sync was asked for (every family: one sync programs them all).
    pub fn queued_update(&self) {
        let now = SystemTime::now();
        let mut s = self.lock();
        for f in &self.families {
            s.queued_update(*f, now);
        }
    }

    /// A sync succeeded (call also once when the loop starts, as kube-proxy does).
    pub fn updated(&self) {
        let now = SystemTime::now();
        let mut s = self.lock();
        for f in &self.families {
            s.updated(*f, now);
        }
    }

    /// See [`ProxyHealth::set_blocked`].
    pub fn set_blocked(&self, reason: Option<&str>) {
        self.lock().set_blocked(reason);
    }

    /// The Node changed: see [`ProxyHealth::sync_node`].
    pub fn sync_node(&self, deleting: bool, taint_keys: &[&str]) {
        self.lock().sync_node(deleting, taint_keys);
    }

    /// kube-proxy's `IsHealthy()`, without node eligibility.
    pub fn is_healthy(&self) -> bool {
        self.lock().verdict(SystemTime::now()).healthy
    }

    /// Records what a sync did. As in kube-proxy, a sync counts as done when the rules were
    /// written, even if some objects failed (they are retried and logged); only a sync that
    /// could program nothing at all makes the agent unhealthy ([`Health::set_blocked`]). The
    /// first such sync that read the kernel (a full one) makes the agent ready.
    pub fn record(&self, report: &Report) {
        let rules_written = !report
            .applied
            .failures(&report.plan)
            .any(|(op, _)| matches!(op, Op::WriteRules { .. }));
        if rules_written {
            self.updated();
            if report.full {
                self.lock().synced_completely();
            }
        }
    }

    /// A copy of the state, for tests and `/configz`-like dumps.
    pub fn snapshot(&self) -> ProxyHealth {
        self.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(full: bool, rules_fail: bool) -> Report {
        use crate::model::kernel::Rules;
        use crate::model::plan::Plan;
        let mut report = Report {
            full,
            plan: Plan {
                ops: vec![Op::WriteRules {
                    family: Family::V4,
                    rules: Box::new(Rules::default()),
                    missing_jumps: Vec::new(),
                }],
                warnings: Vec::new(),
            },
            ..Report::default()
        };
        if rules_fail {
            report
                .applied
                .failed
                .push((0, crate::dataplane::Error::NotSingle));
        } else {
            report.applied.done = 1;
        }
        report
    }

    #[test]
    fn ready_after_the_first_full_sync_that_wrote_the_rules_and_while_not_blocked() {
        let h = Health::new(&[Family::V4], Duration::from_secs(60));
        assert_eq!(h.snapshot().readyz().0, 503, "before any sync");
        h.record(&report(true, true));
        assert_eq!(h.snapshot().readyz().0, 503, "the rules were not written");
        h.record(&report(false, false));
        assert_eq!(
            h.snapshot().readyz().0,
            503,
            "a partial sync is not complete"
        );
        h.record(&report(true, false));
        assert_eq!(h.snapshot().readyz().0, 200);
        h.set_blocked(Some("no virtual server could be made"));
        assert_eq!(h.snapshot().readyz().0, 503);
        h.set_blocked(None);
        // A later failing sync does not undo readiness: /healthz judges that.
        h.record(&report(false, true));
        assert_eq!(h.snapshot().readyz(), (200, "ok"));
    }

    #[test]
    fn a_sync_whose_rules_failed_does_not_count_as_an_update() {
        let h = Health::new(&[Family::V4], Duration::from_secs(60));
        h.record(&report(true, true));
        let last = |h: &Health| h.snapshot().verdict(SystemTime::now()).last_updated;
        assert_eq!(last(&h), None);
        h.record(&report(false, false));
        assert!(last(&h).is_some());
    }
}
