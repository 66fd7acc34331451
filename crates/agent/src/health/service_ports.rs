//! The per-Service health-check node ports of `externalTrafficPolicy: Local` load balancers:
//! kube-proxy's answers, and one listener per port and family, opened and closed as the
//! Services change.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use super::Health;
use crate::model::desired::HealthCheckAddresses;
use crate::model::snapshot::cluster::{Family, ServiceRef};
use crate::model::snapshot::endpoints::HealthCheck;
use crate::web::{self, Request, Response};

/// kube-proxy's body for a Service health check, byte for byte (tab-indented):
/// `{"service": {"namespace": ..,"name": ..},"localEndpoints": N,"serviceProxyHealthy": b}`.
pub fn service_body(service: &ServiceRef, local_endpoints: usize, proxy_healthy: bool) -> String {
    format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {local_endpoints},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
        json_string(&service.namespace),
        json_string(&service.name)
    )
}

/// The answer of a Service's health-check port: 200 when it has local endpoints and the
/// proxy is healthy, else 503; any path.
pub fn service_response(
    service: &ServiceRef,
    local_endpoints: usize,
    proxy_healthy: bool,
) -> Response {
    let code = if local_endpoints > 0 && proxy_healthy {
        200
    } else {
        503
    };
    let mut r = Response::json(code, service_body(service, local_endpoints, proxy_healthy));
    r.headers.push((
        "X-Load-Balancing-Endpoint-Weight",
        local_endpoints.to_string(),
    ));
    r
}

/// Go's `%q` for the ASCII names Kubernetes allows, escaping anything else.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

struct Listener {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Per family and port, the Service and its local endpoint count.
type PortTable = BTreeMap<(Family, u16), (ServiceRef, usize)>;

/// The per-Service health-check servers (`spec.healthCheckNodePort` of
/// `externalTrafficPolicy: Local` load balancers), one per port and family as kube-proxy
/// runs one server per family, opened and closed incrementally.
pub struct ServiceHealthServers {
    addresses: HealthCheckAddresses,
    health: Health,
    /// What each port answers for; read by the listeners on every request.
    table: Arc<Mutex<PortTable>>,
    listeners: BTreeMap<(Family, u16), Listener>,
}

impl ServiceHealthServers {
    /// Servers bound on `addresses`; `serviceProxyHealthy` comes from `health`.
    pub fn new(addresses: HealthCheckAddresses, health: Health) -> Self {
        Self {
            addresses,
            health,
            table: Arc::default(),
            listeners: BTreeMap::new(),
        }
    }

    /// Moves the servers to `addresses`: when they differ, every listener closes and the
    /// next [`sync`](Self::sync) opens them where they now belong.
    pub fn set_addresses(&mut self, addresses: HealthCheckAddresses) {
        if addresses != self.addresses {
            self.listeners.clear();
            self.addresses = addresses;
        }
    }

    /// The ports listened on, by family.
    pub fn ports(&self) -> Vec<(Family, u16)> {
        self.listeners.keys().copied().collect()
    }

    /// Makes the listeners match `wanted`: opens new ports, closes dropped ones, and updates
    /// the Service and endpoint count of the rest in place. Returns the ports that could not
    /// be bound, each with its error (kube-proxy records a `FailedToStartServiceHealthcheck`
    /// event); they are tried again at the next call.
    pub fn sync(&mut self, wanted: &[HealthCheck]) -> Vec<(HealthCheck, std::io::Error)> {
        {
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            table.clear();
            for h in wanted {
                table.insert((h.family, h.port), (h.service.clone(), h.local_endpoints));
            }
        }
        self.listeners
            .retain(|key, _| wanted.iter().any(|h| (h.family, h.port) == *key));
        let mut failed = Vec::new();
        for h in wanted {
            let key = (h.family, h.port);
            if self.listeners.contains_key(&key) {
                continue;
            }
            match self.open(h.family, h.port) {
                Ok(l) => {
                    self.listeners.insert(key, l);
                }
                Err(e) => failed.push((h.clone(), e)),
            }
        }
        failed
    }

    fn open(&self, family: Family, port: u16) -> std::io::Result<Listener> {
        let addrs: Vec<SocketAddr> = match self.addresses.get(&family).cloned().flatten() {
            Some(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect(),
            None => {
                let any = match family {
                    Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                };
                vec![SocketAddr::new(any, port)]
            }
        };
        // All or nothing, as kube-proxy: a port half bound is closed again.
        let listeners = addrs
            .into_iter()
            .map(listen)
            .collect::<std::io::Result<Vec<_>>>()?;
        let tasks = listeners
            .into_iter()
            .map(|l| {
                let table = Arc::clone(&self.table);
                let health = self.health.clone();
                let handler = move |_: &Request| {
                    let entry = table
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&(family, port))
                        .cloned();
                    match entry {
                        Some((svc, n)) => service_response(&svc, n, health.is_healthy()),
                        None => Response::new(503, "text/plain", "closed\n"),
                    }
                };
                tokio::spawn(web::serve(l, Arc::new(handler), web::Limits::default()))
            })
            .collect();
        Ok(Listener { tasks })
    }
}

/// A listening socket on `addr`, of its family only (`IPV6_V6ONLY` on IPv6, as Go's `tcp6`
/// listeners, so the IPv4 and IPv6 servers of one port can coexist).
fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    web::listen(addr, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    #[test]
    fn service_answers() {
        let svc = ServiceRef::new("default", "web");
        let r = service_response(&svc, 2, true);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["service"]["name"], "web");
        assert!(
            r.headers
                .contains(&("X-Load-Balancing-Endpoint-Weight", "2".into()))
        );
        assert!(
            r.headers
                .contains(&("X-Content-Type-Options", "nosniff".into()))
        );
        assert_eq!(service_response(&svc, 0, true).status, 503);
        assert_eq!(service_response(&svc, 3, false).status, 503);
    }

    fn check(family: Family, port: u16, service: &ServiceRef, n: usize) -> HealthCheck {
        HealthCheck {
            family,
            port,
            service: service.clone(),
            local_endpoints: n,
        }
    }

    async fn free_port() -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    }

    fn loopback_v4() -> HealthCheckAddresses {
        BTreeMap::from([(
            Family::V4,
            Some(BTreeSet::from(["127.0.0.1".parse().unwrap()])),
        )])
    }

    #[tokio::test]
    async fn service_listeners_open_and_close_incrementally() {
        let health = Health::new(&[Family::V4], Duration::from_secs(60));
        let mut servers = ServiceHealthServers::new(loopback_v4(), health);
        let (p1, p2) = (free_port().await, free_port().await);
        let web = ServiceRef::new("default", "web");
        let api = ServiceRef::new("prod", "api");
        let v4 = Family::V4;
        assert!(
            servers
                .sync(&[check(v4, p1, &web, 1), check(v4, p2, &api, 0)])
                .is_empty()
        );
        assert_eq!(servers.ports().len(), 2);
        let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let (code, _, body) = web::get(at(p1), "/any/path").await.unwrap();
        assert_eq!(code, 200);
        assert!(body.contains("\"name\": \"web\""));
        assert_eq!(web::get(at(p2), "/").await.unwrap().0, 503);
        // Endpoints change in place; p2 closes.
        assert!(servers.sync(&[check(v4, p1, &web, 0)]).is_empty());
        assert_eq!(servers.ports(), vec![(v4, p1)]);
        let (code, _, body) = web::get(at(p1), "/").await.unwrap();
        assert_eq!(code, 503);
        assert!(body.contains("\"localEndpoints\": 0"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(web::get(at(p2), "/").await.is_err(), "port {p2} still open");
        // A port another process holds is reported, not fatal.
        let holder = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let taken = holder.local_addr().unwrap().port();
        let failed = servers.sync(&[check(v4, p1, &web, 1), check(v4, taken, &api, 1)]);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0.port, taken);
        assert_eq!(servers.ports(), vec![(v4, p1)]);
    }

    #[tokio::test]
    async fn listeners_bind_only_the_addresses_given_and_move_with_them() {
        let health = Health::new(&[Family::V4], Duration::from_secs(60));
        let port = free_port().await;
        let web = ServiceRef::new("default", "web");
        let wanted = [check(Family::V4, port, &web, 1)];
        // Bound on 127.0.0.1 only: 127.0.0.2 (also loopback) gets no answer.
        let mut servers = ServiceHealthServers::new(loopback_v4(), health);
        assert!(servers.sync(&wanted).is_empty());
        let at = |a: [u8; 4]| SocketAddr::from((a, port));
        assert_eq!(web::get(at([127, 0, 0, 1]), "/").await.unwrap().0, 200);
        assert!(web::get(at([127, 0, 0, 2]), "/").await.is_err());
        // No address matching: nothing listens, and that is no failure.
        servers.set_addresses(BTreeMap::from([(Family::V4, Some(BTreeSet::new()))]));
        assert!(servers.sync(&wanted).is_empty());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(web::get(at([127, 0, 0, 1]), "/").await.is_err());
        // Every IPv4 address.
        servers.set_addresses(BTreeMap::new());
        assert!(servers.sync(&wanted).is_empty());
        assert_eq!(web::get(at([127, 0, 0, 2]), "/").await.unwrap().0, 200);
    }
}
