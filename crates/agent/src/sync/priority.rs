//! The first sync of a process programs the priority Services (the API server's, the
//! cluster DNS) before it computes and applies everything else
//! ([`crate::model::plan::priority`]).

use std::collections::BTreeMap;

use tracing::debug;

use super::Syncer;
use crate::dataplane::{Applied, Dataplane, Error};
use crate::model::plan::Plan;
use crate::model::plan::op_kind::{self, OpKind};
use crate::model::plan::priority::priority_plan;
use crate::model::snapshot::cluster::Cluster;

impl<D: Dataplane> Syncer<D> {
    /// On the first sync of this process (nothing computed yet), applies the additive plan of
    /// the priority Services ([`priority_plan`]) on the kernel just observed, and records it
    /// in the shadow. Returns the plan and its outcome when it did something and all of it;
    /// after a failure the kernel is read again, and the full plan retries (and reports) what
    /// failed.
    pub(super) async fn program_priority(
        &mut self,
        cluster: &Cluster,
    ) -> Result<Option<(Plan, Applied)>, Error> {
        if self.incremental.desired().is_some() {
            return Ok(None);
        }
        let shadow = self.shadow.as_mut().expect("observed before");
        let first = priority_plan(cluster, &self.config, &shadow.host, &shadow.state);
        if first.is_empty() {
            return Ok(None);
        }
        let applied = self.dataplane.apply(&first).await?;
        if applied.failed.is_empty() {
            self.record(&first.ops);
            debug!(ops = first.ops.len(), "programmed the priority Services");
            return Ok(Some((first, applied)));
        }
        debug!(
            failed = applied.failed.len(),
            "the priority Services failed; the full sync retries them"
        );
        self.observe_whole().await?;
        Ok(None)
    }

    /// Puts the priority Services' plan that the first sync applied (`first`) before the
    /// sync's own `plan` in what the report shows: the two plans in turn, the second's
    /// indices in `applied` moved, their operations counted together in `op_counts`.
    pub(super) fn report_priority_first(
        &self,
        first: Option<(Plan, Applied)>,
        plan: &mut Plan,
        applied: &mut Applied,
        op_counts: &mut BTreeMap<OpKind, u64>,
    ) {
        let Some((first, mut first_applied)) = first else {
            return;
        };
        for (kind, n) in op_kind::count(&first.ops) {
            *op_counts.entry(kind).or_default() += n;
        }
        let own = std::mem::take(applied);
        let offset = first.ops.len();
        first_applied.merge(Applied {
            failed: own
                .failed
                .into_iter()
                .map(|(i, e)| (i + offset, e))
                .collect(),
            ..own
        });
        // In place: a collected copy of a cold plan doubled its peak memory. A plan that
        // moved into the shadow is reported by its counts alone.
        if self.keep_plans || !first_applied.failed.is_empty() {
            plan.ops.splice(0..0, first.ops);
        }
        *applied = first_applied;
    }
}
