//! How the API server answers, as metrics: client-go's `rest_client_requests_total` and
//! `rest_client_request_duration_seconds` (kube-proxy registers both, with these labels and
//! buckets, and dashboards read them), and per watched kind the last time its watch got
//! through and its errors. An agent cut off from the API server keeps syncing its last state
//! and so looks healthy by the sync metrics alone; these say it is not.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::source::api::ApiObserver;

/// client-go's `rest_client_request_duration_seconds` buckets.
const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The kinds the agent watches, and the reasons a watch fails
/// (`source::api::ApiObserver::watch_error`): every series exists from the start, so that a
/// rate over any of them is defined.
const KINDS: [&str; 3] = ["Service", "EndpointSlice", "Node"];
const REASONS: [&str; 5] = [
    "list",
    "watch-start",
    "watch-status",
    "watch-stream",
    "no-resource-version",
];

/// `{code, method, host}`: `code` is the HTTP status, or `<error>` when no answer came.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
    host: String,
}

/// `{verb, host}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
    host: String,
}

/// `{kind}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// `{kind, reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    kind: &'static str,
    reason: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}
type Durations = Series<VerbLabels, Histogram, fn() -> Histogram>;

/// The families; cheap to clone (every clone records into the same series).
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    requests: Series<RequestLabels, Counter>,
    durations: Durations,
    last_success: Series<KindLabels, FloatGauge>,
    errors: Series<ErrorLabels, Counter>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        let errors = Series::<ErrorLabels, Counter>::default();
        for kind in KINDS {
            for reason in REASONS {
                let _ = errors.get_or_create(&ErrorLabels { kind, reason });
            }
        }
        Self {
            requests: Series::default(),
            durations: Series::new_with_constructor(duration_histogram as fn() -> Histogram),
            last_success: Series::default(),
            errors,
        }
    }
}

impl ApiMetrics {
    /// Registers the families under their exposed names (counters without `_total`).
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "rest_client_requests",
            "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
            self.requests.clone(),
        );
        r.register(
            "rest_client_request_duration_seconds",
            "[ALPHA] Request latency in seconds. Broken down by verb, and host.",
            self.durations.clone(),
        );
        r.register(
            "kube_proxy_ipvs_api_watch_last_success_timestamp_seconds",
            "The last time the watch of this kind got through: an object or event received, or a list or watch request answered 2xx",
            self.last_success.clone(),
        );
        r.register(
            "kube_proxy_ipvs_api_watch_errors",
            "Failures of the watch of this kind, by reason (each is retried with backoff)",
            self.errors.clone(),
        );
    }

    fn succeeded(&self, kind: &'static str) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        self.last_success
            .get_or_create(&KindLabels { kind })
            .set(now);
    }
}

impl ApiObserver for ApiMetrics {
    fn request(
        &self,
        verb: &str,
        host: &str,
        kind: Option<&'static str>,
        code: Option<u16>,
        took: Duration,
    ) {
        let code_label = code.map_or_else(|| "<error>".to_owned(), |c| c.to_string());
        self.requests
            .get_or_create(&RequestLabels {
                code: code_label,
                method: verb.to_owned(),
                host: host.to_owned(),
            })
            .inc();
        self.durations
            .get_or_create(&VerbLabels {
                verb: verb.to_owned(),
                host: host.to_owned(),
            })
            .observe(took.as_secs_f64());
        if let (Some(kind), Some(200..=299)) = (kind, code) {
            self.succeeded(kind);
        }
    }

    fn watch_event(&self, kind: &'static str) {
        self.succeeded(kind);
    }

    fn watch_error(&self, kind: &'static str, reason: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { kind, reason })
            .inc();
    }
}
