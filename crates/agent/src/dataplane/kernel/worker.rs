//! Work that runs on a thread of its own (with its own sockets) while the plan goes on.

use std::time::Instant;

use futures::channel::oneshot;
use tracing::debug;

use crate::dataplane::{Applied, Error};

/// Work running on a worker thread while the plan goes on.
pub(super) struct Worker {
    what: &'static str,
    /// The operations' indices in the plan, to report them failed if the worker dies.
    ops: Vec<usize>,
    result: oneshot::Receiver<Applied>,
}

impl Worker {
    /// Starts `work` on a thread (which inherits the caller's network namespace). `None` when
    /// no thread can be started: the caller then runs the work itself.
    pub(super) fn start(
        what: &'static str,
        ops: Vec<usize>,
        work: impl FnOnce() -> Applied + Send + 'static,
    ) -> Option<Worker> {
        let (tx, rx) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("kernel-{what}"))
            .spawn(move || {
                let _ = tx.send(work());
            })
            .ok()?;
        Some(Worker {
            what,
            ops,
            result: rx,
        })
    }

    pub(super) async fn finish(self, applied: &mut Applied) {
        let t = Instant::now();
        match self.result.await {
            Ok(more) => applied.merge(more),
            Err(_) => {
                for i in self.ops {
                    applied.failed.push((i, Error::WorkerStopped(self.what)));
                }
            }
        }
        debug!(what = self.what, waited = ?t.elapsed(), "worker joined");
    }
}
