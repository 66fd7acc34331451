//! The read of a periodic pass, made apart: it runs on a task of its own while the loop keeps
//! syncing changes against the shadow, and every operation applied meanwhile is journaled.
//!
//! Which of those operations the read saw is not known (each object is read at a moment of
//! its own), so the pass replays the journal on what the read found: each operation sets
//! what it touches (an entry, a real server, a virtual server's attributes), so whatever the
//! read saw of it, the object ends as the operations left it.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::task::JoinHandle;

use crate::dataplane::Error;
use crate::model::plan::Op;

/// A read made apart, and the operations applied since it started.
pub(super) struct Reading<R> {
    /// The read while it runs, with how long it takes.
    task: Option<JoinHandle<(Result<R, Error>, Duration)>>,
    /// What it found once it ended, and how long it took.
    found: Option<(Result<R, Error>, Duration)>,
    journal: Vec<Op>,
}

impl<R: Send + 'static> Reading<R> {
    /// Starts `read` on a task of its own (it needs a tokio runtime).
    pub(super) fn start(read: BoxFuture<'static, Result<R, Error>>) -> Self {
        Reading {
            task: Some(tokio::spawn(async move {
                let t = Instant::now();
                let found = read.await;
                (found, t.elapsed())
            })),
            found: None,
            journal: Vec::new(),
        }
    }

    /// Records `ops`, which the kernel has just applied.
    pub(super) fn record(&mut self, ops: &[Op]) {
        self.journal.extend_from_slice(ops);
    }

    /// Whether the read has ended (and [`Reading::finish`] will not wait).
    pub(super) fn is_done(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits until the read ends. Cancel-safe: dropped midway, the read goes on.
    pub(super) async fn wait(&mut self) {
        if let Some(task) = &mut self.task {
            let found = task
                .await
                .unwrap_or((Err(Error::WorkerStopped("kernel reader")), Duration::ZERO));
            self.found = Some(found);
            self.task = None;
        }
    }

    /// What the read found (waiting for it if it runs still), how long it took, and the
    /// journal.
    pub(super) async fn finish(mut self) -> (Result<R, Error>, Duration, Vec<Op>) {
        self.wait().await;
        let (found, took) = self.found.take().expect("the read ended above");
        (found, took, std::mem::take(&mut self.journal))
    }
}

impl<R> Drop for Reading<R> {
    /// A read given up (a sync failed, so the next pass reads the kernel whole) stops.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
