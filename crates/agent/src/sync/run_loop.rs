//! The loop that runs syncs: when the next one runs, whether it reads the kernel or takes
//! the changed Services alone, and what follows a failure.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::failures::{self, Backoff, Blocked, FailureLog, Failures, SyncError, cannot_program};
use super::{Periods, Report, Syncer};
use crate::dataplane::{Dataplane, Error};
use crate::model::snapshot::changes::Published;

/// Runs until `shutdown` resolves: syncs whenever `snapshots` changes (debounced by
/// `min_sync`) and fully every `sync` period, handing each sync what changed since the
/// snapshot of the last one as the source recorded it. `snapshots` holds `None` until the
/// source has listed everything once.
///
/// When the kernel refuses something, the loop reads it again and retries with exponential
/// backoff (from `min_sync`, at least 1 s, up to the sync period); each distinct failure is
/// logged once, and once more when it ends. `on_report` sees every sync that ran;
/// `on_blocked` is told after every pass why nothing at all could be programmed (`Some`), or
/// that something could (`None`).
pub async fn run<D: Dataplane>(
    syncer: &mut Syncer<D>,
    mut snapshots: watch::Receiver<Option<Published>>,
    periods: Periods,
    shutdown: impl Future<Output = ()>,
    mut on_report: impl FnMut(&Report),
    mut on_blocked: impl FnMut(Option<&Blocked>),
) {
    tokio::pin!(shutdown);
    let mut pacing = Pacing::new(periods);
    loop {
        if !pacing.wake(syncer, &mut snapshots, &mut shutdown).await {
            return;
        }
        let Some(snapshot) = snapshots.borrow_and_update().clone() else {
            debug!("waiting for the source's first complete snapshot");
            pacing.wait = true;
            pacing.next_full = Instant::now() + periods.sync;
            continue;
        };
        let Some((full, result)) = pacing.sync(syncer, snapshot).await else {
            continue;
        };
        let (failed, blocked) = match result {
            Ok(report) => {
                let blocked = pacing.synced(&report, full, syncer.desired_virtual_servers());
                on_report(&report);
                (failures::failures(&report), blocked)
            }
            Err(e) => {
                let failed = vec![(
                    "sync".to_string(),
                    failures::Explained::Plain(e.to_string()),
                )];
                (failed, Some(Blocked::Sync(SyncError(Arc::new(e)))))
            }
        };
        pacing.failures(failed);
        pacing.tell_blocked(blocked.clone());
        on_blocked(blocked.as_ref());
    }
}

/// What the loop keeps from pass to pass.
struct Pacing {
    periods: Periods,
    /// When the next full sync is due.
    next_full: Instant,
    /// When the last sync started.
    last_sync: Option<Instant>,
    backoff: Backoff,
    failure_log: FailureLog,
    /// Why nothing at all could be programmed, as last told.
    last_blocked: Option<Blocked>,
    /// Whether the pass waits for a change or the full-sync timer: the first pass syncs at
    /// once, later ones wait.
    wait: bool,
    /// The generation of the snapshot of the last sync.
    seen: Option<u64>,
    /// Whether the last pass failed: its retry reads the kernel itself, whole.
    failing: bool,
}

impl Pacing {
    fn new(periods: Periods) -> Self {
        Self {
            periods,
            next_full: Instant::now(),
            last_sync: None,
            backoff: Backoff::new(periods.min_sync, periods.sync),
            failure_log: FailureLog::default(),
            last_blocked: None,
            wait: false,
            seen: None,
            failing: false,
        }
    }

    /// Waits for a change, the full-sync timer or the end of a read made apart, then for
    /// `min_sync` to have passed since the last sync. False when the loop is to stop: on
    /// `shutdown`, or when the source is gone (the kernel keeps the last state).
    async fn wake<D: Dataplane>(
        &mut self,
        syncer: &mut Syncer<D>,
        snapshots: &mut watch::Receiver<Option<Published>>,
        shutdown: &mut Pin<&mut impl Future<Output = ()>>,
    ) -> bool {
        if self.wait {
            // While the read of a periodic pass runs apart, the pass waits for its end.
            let reading = syncer.reading();
            tokio::select! {
                _ = shutdown.as_mut() => return false,
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                }
                _ = tokio::time::sleep_until(self.next_full), if !reading => {}
                _ = syncer.read_end(), if reading => {}
            }
        }
        // Debounce.
        if let Some(last) = self.last_sync {
            let earliest = last + self.periods.min_sync;
            if Instant::now() < earliest {
                tokio::select! {
                    _ = shutdown.as_mut() => return false,
                    _ = tokio::time::sleep_until(earliest) => {}
                }
            }
        }
        true
    }

    /// Syncs `snapshot`: fully when due (a periodic pass reads the kernel apart, and runs
    /// once the read ends) or when the Node changed, else the Services that changed since the
    /// snapshot of the last sync. Returns whether the sync was full and what it did; `None`
    /// when there was nothing to sync.
    async fn sync<D: Dataplane>(
        &mut self,
        syncer: &mut Syncer<D>,
        snapshot: Published,
    ) -> Option<(bool, Result<Report, Error>)> {
        // The changes that come while a read runs apart sync at once against the shadow (a
        // read at scale takes seconds).
        let due = Instant::now() >= self.next_full && !syncer.reading();
        let started = due && !self.failing && syncer.start_read();
        // What changed since the last sync, as the source recorded it; `None` before the
        // first sync, or when the source's log no longer reaches back (then the desired state
        // is built whole).
        let changes = self.seen.and_then(|g| snapshot.changes_since(g));
        // A change of the Node (its addresses above all) comes with a change of the host's
        // own addresses, which only a read of the kernel sees: node ports would stay on the
        // addresses of the last read until the next periodic pass (kube-proxy reads them in
        // every sync, and restarts when its node IP changes).
        let node_changed = changes.as_ref().is_some_and(|c| c.node_changed());
        let full = syncer.read_ended() || (due && !started) || node_changed;
        self.wait = true;
        if started && changes.as_ref().is_some_and(|c| c.is_empty()) {
            // The timer started the read, and nothing changed: nothing to sync until it ends.
            return None;
        }
        self.last_sync = Some(Instant::now());
        self.seen = Some(snapshot.generation());
        let cluster = &snapshot.cluster;
        let result = match &changes {
            Some(changes) => syncer.sync_with(cluster, full, changes).await,
            None => syncer.sync(cluster, full).await,
        };
        Some((full, result))
    }

    /// Logs what a sync did and times the next full one. Returns why nothing at all could
    /// be programmed, if so (`desired` virtual servers were wanted).
    fn synced(&mut self, report: &Report, full: bool, desired: usize) -> Option<Blocked> {
        for w in &report.warnings {
            warn!(warning = w.kind(), "{w}");
        }
        if report.ops() > 0 {
            info!(
                full = report.full,
                ops = report.ops(),
                failed = report.applied.failed.len(),
                "synced"
            );
        }
        if report.applied.failed.is_empty() && full {
            self.next_full = Instant::now() + self.periods.sync;
        }
        if let Some(recheck) = report.recheck_in {
            self.next_full = self.next_full.min(Instant::now() + recheck);
        }
        cannot_program(report, desired)
    }

    /// Logs the failures that start and end, and after a failure times the retry, with
    /// the kernel read again, later each time it fails again.
    fn failures(&mut self, failed: Failures) {
        let changes = self.failure_log.update(failed.clone());
        for (what, error) in &changes.new {
            warn!(op = %what, error = %error, "the kernel refused; retrying with backoff");
        }
        for what in &changes.ended {
            info!(op = %what, "no longer failing");
        }
        self.failing = !failed.is_empty();
        if failed.is_empty() {
            self.backoff.succeeded();
        } else {
            let delay = self.backoff.failed();
            debug!(
                failures = failed.len(),
                repeated = changes.repeated,
                retry_in = ?delay,
                "sync had failures"
            );
            self.next_full = Instant::now() + delay;
        }
    }

    /// Logs when nothing at all can be programmed any more, or can be again.
    fn tell_blocked(&mut self, blocked: Option<Blocked>) {
        if blocked == self.last_blocked {
            return;
        }
        match &blocked {
            Some(reason) => {
                warn!(reason = %reason, blocked = reason.kind(), "cannot program the kernel at all; /healthz is 503 and kube_proxy_ipvs_blocked 1")
            }
            None if self.last_blocked.is_some() => info!("the kernel can be programmed again"),
            None => {}
        }
        self.last_blocked = blocked;
    }
}
