//! The tasks the agent runs beside its sync loop, kept in one set so that shutdown reaches
//! every one of them.
//!
//! As mini-redis hands each connection its shutdown, every part that starts a task is handed
//! the set ([`Tasks`]) and spawns into it; nothing is spawned detached. At exit the set is
//! ended: each task stops at its next await and the exit waits until all have. None of them
//! holds kernel state (the servers, the source's watches, the followers of the snapshots, the
//! events on their way), so stopping them anywhere leaves the kernel as the last sync left it.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::JoinSet;

/// The set of the agent's tasks. Clones share it, so a task or a callback can start more.
#[derive(Debug, Clone, Default)]
pub struct Tasks(Arc<Mutex<Set>>);

#[derive(Debug, Default)]
struct Set {
    running: JoinSet<()>,
    /// Set by [`Tasks::end`]: later tasks are not started.
    ended: bool,
}

impl Tasks {
    fn lock(&self) -> MutexGuard<'_, Set> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `task` until it finishes or the set ends; once the set has ended, `task` is
    /// dropped unstarted.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.lock();
        if set.ended {
            return;
        }
        // Finished tasks leave here, so that the set holds only running ones.
        while set.running.try_join_next().is_some() {}
        set.running.spawn(task);
    }

    /// Stops every task at its next await and waits until all have stopped.
    pub async fn end(&self) {
        let mut running = {
            let mut set = self.lock();
            set.ended = true;
            std::mem::take(&mut set.running)
        };
        running.shutdown().await;
    }

    /// How many tasks run (finished ones not yet collected are counted).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().running.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// Tells, when dropped, that the task holding it is gone.
    struct Gone(Option<oneshot::Sender<()>>);

    impl Drop for Gone {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }

    #[tokio::test]
    async fn ending_stops_every_task_even_those_started_by_tasks() {
        let tasks = Tasks::default();
        let (outer_tx, outer_gone) = oneshot::channel();
        let (inner_tx, inner_gone) = oneshot::channel();
        let (started_tx, started) = oneshot::channel();
        let spawner = tasks.clone();
        tasks.spawn(async move {
            let _gone = Gone(Some(outer_tx));
            spawner.spawn(async move {
                let _gone = Gone(Some(inner_tx));
                let _ = started_tx.send(());
                std::future::pending::<()>().await
            });
            std::future::pending::<()>().await
        });
        started.await.unwrap();
        assert_eq!(tasks.len(), 2);
        tasks.end().await;
        // Both were dropped before `end` returned.
        assert_eq!(outer_gone.await, Ok(()));
        assert_eq!(inner_gone.await, Ok(()));
        assert_eq!(tasks.len(), 0);
    }

    #[tokio::test]
    async fn nothing_starts_after_the_end_and_finished_tasks_leave() {
        let tasks = Tasks::default();
        let (tx, rx) = oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = tx.send(());
        });
        rx.await.unwrap();
        tokio::task::yield_now().await;
        tasks.spawn(std::future::pending());
        assert_eq!(tasks.len(), 1, "the finished task was collected");
        tasks.end().await;
        let (tx, mut rx) = oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = tx.send(());
        });
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "a task started after the end");
        assert_eq!(tasks.len(), 0);
    }
}
