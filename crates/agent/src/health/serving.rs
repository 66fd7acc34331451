//! The healthz server: `/healthz`, `/livez` and `/readyz` on `healthzBindAddress`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Health, ProxyHealth};
use crate::metrics::Metrics;
use crate::web::{self, Request, Response};

/// The routes of the healthz server: `/healthz` and `/livez` (counted in `metrics`) and
/// `/readyz`.
pub fn handle(
    health: &ProxyHealth,
    metrics: Option<&Metrics>,
    request: &Request,
    now: SystemTime,
) -> Response {
    match request.path.as_str() {
        "/healthz" => {
            let (code, body) = health.healthz(now);
            if let Some(m) = metrics {
                m.healthz_response(code);
            }
            Response::json(code, body)
        }
        "/livez" => {
            let (code, body) = health.livez(now);
            if let Some(m) = metrics {
                m.livez_response(code);
            }
            Response::json(code, body)
        }
        "/readyz" => {
            let (code, body) = health.readyz();
            Response::new(code, "text/plain; charset=utf-8", body)
        }
        _ => Response::not_found(),
    }
}

/// Serves `/healthz`, `/livez` and `/readyz` on `addr` (`healthzBindAddress`) until dropped. A bind
/// failure is retried every 5 s, or returned when `hard_fail` (`bindAddressHardFail`).
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    metrics: Option<Arc<Metrics>>,
    hard_fail: bool,
) -> std::io::Result<()> {
    let handler = move |r: &Request| {
        let state = health.snapshot();
        handle(&state, metrics.as_deref(), r, SystemTime::now())
    };
    web::run(addr, Arc::new(handler), hard_fail, "healthz").await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::cluster::Family;
    use std::time::{Duration, UNIX_EPOCH};

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }
    #[test]
    fn routes_count_in_metrics() {
        let m = Metrics::new(&[Family::V4], false);
        let h = ProxyHealth::new(Duration::from_secs(60));
        let req = |p: &str| Request {
            method: "GET".into(),
            path: p.into(),
        };
        assert_eq!(handle(&h, Some(&m), &req("/healthz"), t(0)).status, 200);
        assert_eq!(handle(&h, Some(&m), &req("/livez"), t(0)).status, 200);
        assert_eq!(handle(&h, Some(&m), &req("/metrics"), t(0)).status, 404);
        let text = m.render();
        assert!(
            text.contains("kubeproxy_proxy_healthz_total{code=\"200\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("kubeproxy_proxy_livez_total{code=\"200\"} 1\n"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn healthz_over_http() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let health = Health::new(&[Family::V4], Duration::from_secs(60));
        health.updated();
        let h2 = health.clone();
        let handler = move |r: &Request| handle(&h2.snapshot(), None, r, SystemTime::now());
        let server = tokio::spawn(web::serve(
            listener,
            Arc::new(handler),
            web::Limits::default(),
        ));
        let (code, headers, body) = web::get(addr, "/healthz").await.unwrap();
        assert_eq!(code, 200);
        assert_eq!(
            web::header(&headers, "content-type"),
            Some("application/json")
        );
        assert_eq!(
            web::header(&headers, "x-content-type-options"),
            Some("nosniff")
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["nodeEligible"], true);
        health.sync_node(true, &[]);
        assert_eq!(web::get(addr, "/healthz").await.unwrap().0, 503);
        assert_eq!(web::get(addr, "/livez").await.unwrap().0, 200);
        let (code, _, body) = web::get(addr, "/readyz").await.unwrap();
        assert_eq!(
            (code, body.as_str()),
            (503, "waiting for the first complete sync")
        );
        server.abort();
    }
}
