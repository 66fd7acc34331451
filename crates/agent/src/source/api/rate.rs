//! A client-side request rate limit, as client-go's `QPS` and `Burst`: a token bucket of
//! `burst` tokens refilled at `qps` per second, one token per request (watches included).
//! kube has none of its own, so this is a tower layer on the client's stack.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service};

/// The bucket: pure arithmetic over the times it is given.
#[derive(Debug)]
pub(super) struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket at `now`; a burst of 0 is taken as 1 (a request must be able to pass).
    pub(super) fn new(qps: f32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token at `now`, going into debt if there is none: the answer is how long
    /// the caller must wait before its request may go (zero when a token was there).
    pub(super) fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// The layer; its services share one bucket.
#[derive(Debug, Clone)]
pub(super) struct RateLimitLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl RateLimitLayer {
    /// A limit of `qps` requests per second with bursts of `burst`; `qps` must be positive.
    pub(super) fn new(qps: f32, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(Bucket::new(qps, burst, Instant::now()))),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            bucket: self.bucket.clone(),
        }
    }
}

/// A service whose requests wait for a token first.
pub(super) struct RateLimited<S> {
    // The client's stack is not `Clone`; the requests share it behind a lock held only while
    // a request is handed over, not while it is answered.
    inner: Arc<tokio::sync::Mutex<S>>,
    bucket: Arc<Mutex<Bucket>>,
}

impl<S, Req> Service<Req> for RateLimited<S>
where
    S: Service<Req> + Send + 'static,
    S::Future: Send + 'static,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness is the inner service's, checked when the request's turn comes.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let now = Instant::now();
        let wait = self
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reserve(now);
        let inner = self.inner.clone();
        Box::pin(async move {
            // The token is due at a time fixed now, however late the future is first polled.
            if !wait.is_zero() {
                tokio::time::sleep_until(now + wait).await;
            }
            let answer = {
                let mut service = inner.lock().await;
                std::future::poll_fn(|cx| service.poll_ready(cx)).await?;
                service.call(req)
            };
            answer.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_spaces_requests_by_one_over_qps() {
        let t0 = Instant::now();
        let mut b = Bucket::new(5.0, 10, t0);
        for _ in 0..10 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        // The 11th waits 1/5 s, the 12th 2/5 s (each reservation takes its own slot).
        assert_eq!(b.reserve(t0), Duration::from_millis(200));
        assert_eq!(b.reserve(t0), Duration::from_millis(400));
        // A second later, five tokens came back and two were owed.
        let t1 = t0 + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(b.reserve(t1), Duration::ZERO);
        }
        assert_eq!(b.reserve(t1), Duration::from_millis(200));
        // After a long quiet time, the bucket holds `burst` and no more.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..10 {
            assert_eq!(b.reserve(t2), Duration::ZERO);
        }
        assert!(b.reserve(t2) > Duration::ZERO);
    }

    /// Answers with the request and the time it was handed over.
    struct Clock;

    impl Service<u32> for Clock {
        type Response = (u32, Instant);
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<(u32, Instant), Self::Error>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, n: u32) -> Self::Future {
            std::future::ready(Ok((n, Instant::now())))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_beyond_the_burst_wait_for_their_token() {
        let layer = RateLimitLayer::new(2.0, 1);
        let mut service = layer.layer(Clock);
        let start = Instant::now();
        let calls: Vec<_> = (0..3).map(|n| service.call(n)).collect();
        let mut times = Vec::new();
        for c in calls {
            let (n, at) = c.await.unwrap();
            times.push((n, (at - start).as_millis()));
        }
        assert_eq!(times, [(0, 0), (1, 500), (2, 1000)]);
    }
}
