//! What the API client and the watches tell an observer: each request with its verb, host,
//! status and duration (client-go's `rest_client_*` metrics), and each watch's events and
//! errors by kind. The metrics implement [`ApiObserver`]; the source knows nothing of them.

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tower::{Layer, Service};

/// Whoever wants to know how the API server answers.
pub trait ApiObserver: Debug + Send + Sync + 'static {
    /// A request of `verb` to `host` answered with `code` (`None`: no answer: a connection
    /// or TLS error) after `took` (to the answer's head: a watch's stream is not counted);
    /// `kind` is the watched kind it lists or watches (`Service`, `EndpointSlice`, `Node`),
    /// if any.
    fn request(
        &self,
        verb: &str,
        host: &str,
        kind: Option<&'static str>,
        code: Option<u16>,
        took: Duration,
    );
    /// The watch of `kind` delivered an event (or a listed object).
    fn watch_event(&self, kind: &'static str);
    /// The watch of `kind` failed, for `reason` (a fixed word: `list`, `watch-start`,
    /// `watch-status`, `watch-stream` or `no-resource-version`).
    fn watch_error(&self, kind: &'static str, reason: &'static str);
}

/// The kind a request's path lists or watches.
pub(super) fn kind_of(path: &str) -> Option<&'static str> {
    let last = path.rsplit('/').next()?;
    match last {
        "services" => Some("Service"),
        "endpointslices" => Some("EndpointSlice"),
        "nodes" => Some("Node"),
        _ => None,
    }
}

/// The word [`ApiObserver::watch_error`] gets for `e`.
pub(super) fn error_reason(e: &kube::runtime::watcher::Error) -> &'static str {
    use kube::runtime::watcher::Error;
    match e {
        Error::InitialListFailed(_) => "list",
        Error::WatchStartFailed(_) => "watch-start",
        Error::WatchError(_) => "watch-status",
        Error::WatchFailed(_) => "watch-stream",
        Error::NoResourceVersion => "no-resource-version",
    }
}

/// The layer that tells `observer` of every request.
#[derive(Debug, Clone)]
pub(super) struct ObserveLayer {
    observer: Arc<dyn ApiObserver>,
    host: Arc<str>,
}

impl ObserveLayer {
    /// Requests to `host` (the API server's `host:port`, client-go's `host` label).
    pub(super) fn new(observer: Arc<dyn ApiObserver>, host: &str) -> Self {
        Self {
            observer,
            host: host.into(),
        }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Observed<S> {
        Observed {
            inner,
            observer: self.observer.clone(),
            host: self.host.clone(),
        }
    }
}

/// A service whose requests are told to the observer.
#[derive(Debug, Clone)]
pub(super) struct Observed<S> {
    inner: S,
    observer: Arc<dyn ApiObserver>,
    host: Arc<str>,
}

impl<S, B, R> Service<http::Request<B>> for Observed<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let verb = req.method().as_str().to_owned();
        let kind = kind_of(req.uri().path());
        let (observer, host) = (self.observer.clone(), self.host.clone());
        let start = Instant::now();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            let code = answer.as_ref().ok().map(|r| r.status().as_u16());
            observer.request(&verb, &host, kind, code, start.elapsed());
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_kind_they_list_or_watch() {
        assert_eq!(kind_of("/api/v1/services"), Some("Service"));
        assert_eq!(
            kind_of("/apis/discovery.k8s.io/v1/endpointslices"),
            Some("EndpointSlice")
        );
        assert_eq!(kind_of("/api/v1/nodes"), Some("Node"));
        assert_eq!(kind_of("/apis/events.k8s.io/v1/namespaces/a/events"), None);
        assert_eq!(kind_of("/api/v1/namespaces/a/services/web"), None);
    }
}
