//! How a watch gets its initial state: streamed by the API server (WatchList), or listed
//! when the server cannot stream.
//!
//! A streamed initial state is a watch with `sendInitialEvents=true`: the objects come as
//! ADDED events, then a BOOKMARK annotated `k8s.io/initial-events-end`. The agent never
//! holds a whole list body and its decoded copy at once, which is most of its memory at
//! start on a large cluster. A server without the feature (gate off) answers such a watch
//! 400 or 422; one too old to know the parameter streams the objects but never the end
//! bookmark. Either way the kind falls back to lists, for the life of the process, and says
//! so once.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tracing::warn;

use super::{WatchResult, watch_kind};

/// How long a streamed initial state may go silent, its end bookmark not yet seen, before
/// the server is taken for one that ignores `sendInitialEvents` (the default of
/// [`super::Watches::stream_silence`]).
pub const SILENCE: Duration = Duration::from_secs(30);

/// Whether `error` is the server refusing a streamed initial state (no WatchList).
pub fn cannot_stream(error: &watcher::Error) -> bool {
    let refused = |code: u16| code == 400 || code == 422;
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => refused(status.code),
        watcher::Error::WatchError(status) => refused(status.code),
        _ => false,
    }
}

struct Fallback<K: Resource<DynamicType = ()> + Clone + 'static> {
    inner: BoxStream<'static, WatchResult<K>>,
    api: Api<K>,
    /// The listing configuration, until the fallback took it.
    listing: Option<watcher::Config>,
    /// Between a streamed `Init` and its `InitDone`.
    initial: bool,
    silence: Duration,
}

impl<K> Fallback<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    fn list_instead(&mut self, why: &str) {
        if let Some(config) = self.listing.take() {
            warn!(
                kind = std::any::type_name::<K>()
                    .rsplit("::")
                    .next()
                    .unwrap_or_default(),
                why,
                "the API server does not stream the initial state (WatchList); listing \
                 instead, which holds each whole list in memory at once"
            );
            self.inner = watch_kind(self.api.clone(), config);
            self.initial = false;
        }
    }

    async fn next(&mut self) -> Option<WatchResult<K>> {
        loop {
            let item = if self.listing.is_some() && self.initial {
                match tokio::time::timeout(self.silence, self.inner.next()).await {
                    Ok(item) => item,
                    Err(_) => {
                        self.list_instead("the initial events never ended");
                        continue;
                    }
                }
            } else {
                self.inner.next().await
            }?;
            if self.listing.is_some() {
                match &item {
                    Ok(Event::Init) => self.initial = true,
                    Ok(Event::InitDone) => self.initial = false,
                    Ok(_) => {}
                    Err(e) if cannot_stream(e) => {
                        self.list_instead(&e.to_string());
                        continue;
                    }
                    // A retry (after the backoff) is no silence of the server's.
                    Err(_) => self.initial = false,
                }
            }
            return Some(item);
        }
    }
}

/// The watch of one kind with `config`, its initial state streamed while the server can,
/// listed after (see the module's doc); `silence` as [`SILENCE`].
pub fn streamed_or_listed<K>(
    api: Api<K>,
    config: watcher::Config,
    silence: Duration,
) -> BoxStream<'static, WatchResult<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let state = Fallback {
        inner: watch_kind(api.clone(), config.clone().streaming_lists()),
        api,
        listing: Some(config),
        initial: false,
        silence,
    };
    futures::stream::unfold(state, |mut state| async move {
        let item = state.next().await?;
        Some((item, state))
    })
    .boxed()
}
