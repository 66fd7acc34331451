//! The kernel read of a full sync: whole at the first sync, after a failure and on small
//! nodes; else the periodic pass's share ([`crate::model::kernel::rolling`]), read apart while
//! changes keep syncing against the shadow ([`super::reading`]) and taken in by the next full
//! sync.

use std::collections::BTreeSet;
use std::time::Duration;

use tracing::debug;

use super::Syncer;
use super::reading::Reading;
use crate::dataplane::{Dataplane, Error, Observation};
use crate::model::incremental::shadow::Shadow;
use crate::model::kernel::VsKey;
use crate::model::kernel::rolling::Part;
use crate::model::plan::Op;

impl<D: Dataplane> Syncer<D> {
    /// Starts the kernel read of the next full sync apart ([`Dataplane::read_apart`]): it
    /// runs on a task of its own while syncs of changes go on against the shadow, which
    /// record what they apply; the next [`Syncer::sync`] with `full` takes what it found in.
    /// Returns false, starting nothing, when there is no shadow to sync changes against
    /// (the first sync, or one after a failure): the full sync then reads the kernel itself.
    /// Spawns the read on the current tokio runtime.
    pub fn start_read(&mut self) -> bool {
        if self.reading.is_some() {
            return true;
        }
        if self.shadow.is_none() || self.incremental.desired().is_none() || !self.settled {
            return false;
        }
        let part = self.next_part();
        self.reading = Some(Reading::start(self.dataplane.read_apart(part)));
        true
    }

    /// Whether a read started apart waits to be taken in by a full sync.
    pub fn reading(&self) -> bool {
        self.reading.is_some()
    }

    /// Whether a read started apart has ended, so a full sync would not wait for it.
    pub fn read_ended(&self) -> bool {
        self.reading.as_ref().is_some_and(Reading::is_done)
    }

    /// Waits until the read started apart ends; never, when none runs. Cancel-safe.
    pub async fn read_end(&mut self) {
        match &mut self.reading {
            Some(reading) => reading.wait().await,
            None => std::future::pending().await,
        }
    }

    /// Reads the kernel for a full sync: whole at the first sync, after a failure and on small
    /// nodes, else the periodic pass ([`crate::model::kernel::rolling`]), whose unread real servers
    /// keep what the shadow knew of them; or takes in the read started apart. Returns the
    /// virtual servers whose real servers were not read, and how long the read apart took
    /// (the sync's time includes its read).
    pub(super) async fn read_kernel(&mut self) -> Result<(BTreeSet<VsKey>, Duration), Error> {
        let (observation, unread, journal, took) = match self.reading.take() {
            Some(reading) => {
                let (found, took, journal) = reading.finish().await;
                let (observation, unread) = self.dataplane.finish_read(found?).await?;
                (observation, unread, journal, took)
            }
            None => {
                let Some(part) = self.next_part() else {
                    self.observe_whole().await?;
                    return Ok((BTreeSet::new(), Duration::ZERO));
                };
                let (observation, unread) = self.dataplane.observe_part(&part).await?;
                (observation, unread, Vec::new(), Duration::ZERO)
            }
        };
        Ok((self.take_in(observation, unread, &journal).await?, took))
    }

    /// The part of the kernel the next periodic pass reads (counting the pass); `None` to
    /// read it whole.
    fn next_part(&mut self) -> Option<Part> {
        let shadow = self.shadow.as_ref()?;
        let always = self.draining.keys().map(|(key, _)| *key).collect();
        let part = Part::of_pass(
            self.pass,
            shadow.state.services.len(),
            self.read_share,
            always,
        )?;
        self.pass += 1;
        Some(part)
    }

    /// Makes what a read found the shadow: the real servers it did not read keep what the
    /// shadow knew of them, and `journal`, the operations applied while it ran, is replayed
    /// on it (whichever of them it saw, each object ends as they left it). Returns the
    /// virtual servers whose real servers are still unread.
    async fn take_in(
        &mut self,
        observation: Observation,
        mut unread: BTreeSet<VsKey>,
        journal: &[Op],
    ) -> Result<BTreeSet<VsKey>, Error> {
        let Observation {
            mut state,
            host,
            traffic,
        } = observation;
        self.traffic = traffic;
        let mut old = self.shadow.take();
        let mut unknown = Vec::new();
        for key in &unread {
            let was = old.as_mut().and_then(|o| o.state.services.get_mut(key));
            match (was, state.services.get_mut(key)) {
                // The shadow's real servers of this one: those the journal changed included.
                (Some(was), Some(now)) => now.destinations = std::mem::take(&mut was.destinations),
                _ => unknown.push(*key),
            }
        }
        drop(old);
        let mut shadow = Shadow { state, host };
        shadow.replay(journal);
        // Counts read before a real server changed (a drain that began meanwhile) must not
        // end its drain: they are left unknown until the next read.
        for op in journal {
            if let Op::AddDestination {
                key, destination, ..
            }
            | Op::UpdateDestination {
                key, destination, ..
            } = op
                && let Some(vs) = shadow.state.services.get_mut(key)
            {
                vs.connections.remove(destination);
            }
        }
        // Gone with the journal: nothing left to read.
        unread.retain(|key| shadow.state.services.contains_key(key));
        unknown.retain(|key| unread.contains(key));
        if !unknown.is_empty() {
            // Virtual servers the shadow did not know (someone else's, made since): read now.
            shadow.refresh(self.dataplane.observe_real_servers(&unknown).await?);
            for key in &unknown {
                unread.remove(key);
            }
        }
        debug!(
            unread = unread.len(),
            replayed = journal.len(),
            "read the kernel"
        );
        self.shadow = Some(shadow);
        Ok(unread)
    }

    /// Sets how many virtual servers' real servers a periodic pass reads at most
    /// ([`crate::model::kernel::rolling::READ_SHARE`] by default; `usize::MAX` reads everything).
    pub fn set_read_share(&mut self, per_pass: usize) {
        self.read_share = per_pass;
    }
}
