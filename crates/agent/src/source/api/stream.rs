//! The watch stream of one kind: kube-runtime's watcher and its backoff, which starts over
//! after a `410 Gone` (a request to relist, not a failure).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event, watcher};
use serde::de::DeserializeOwned;

use super::Result;

pub(super) type WatchResult<K> = Result<Event<K>, watcher::Error>;

/// The watch of one kind with its backoff.
pub(super) fn watch_kind<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, WatchResult<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let backoff = RelistBackoff::default();
    let gone = backoff.gone.clone();
    watcher(api, config)
        .inspect(move |item| {
            if let Err(e) = item
                && asks_for_relist(e)
            {
                gone.store(true, Ordering::Relaxed);
            }
        })
        .backoff(backoff)
        .boxed()
}

/// Whether a watcher error is the server's `410 Gone`/`Expired` (a watch from a compacted
/// resourceVersion, an expired continue token): a request to relist, not a failure.
pub(super) fn asks_for_relist(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// kube-runtime's default backoff (0.8 s doubling to 30 s, jittered, reset by any event),
/// except after a `410 Gone`: the relist then starts after a first step (0.8 to 1.6 s) instead
/// of the next one. After an outage the backoff is at its maximum, and the resumed watch's
/// 410 would otherwise add a second 30 to 60 s before the relist that brings the changes.
#[derive(Default)]
pub(super) struct RelistBackoff {
    pub(super) inner: DefaultBackoff,
    /// Set by the stream when the error about to be backed off from is a 410.
    pub(super) gone: Arc<AtomicBool>,
}

impl Iterator for RelistBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.gone.swap(false, Ordering::Relaxed) {
            // A fresh sequence's first step: jittered like the others, the inner one untouched
            // (if the relist fails too, the backoff goes on from where it was).
            return DefaultBackoff::default().next();
        }
        self.inner.next()
    }
}

impl Backoff for RelistBackoff {
    fn reset(&mut self) {
        self.inner.reset();
    }
}
