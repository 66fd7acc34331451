//! kube-proxy's health semantics: `/healthz` and `/livez` on `healthzBindAddress`, and the
//! per-Service health-check node ports of `externalTrafficPolicy: Local` load balancers.
//!
//! [`ProxyHealth`] is the pure state machine (time is an argument) of kube-proxy's
//! `ProxyHealthServer`: per IP family, the last successful sync and the oldest sync queued
//! since; a family is unhealthy once a queued sync has waited `2 × ipvs.syncPeriod`.
//! `/healthz` also needs the node to be eligible (not being deleted, no cluster-autoscaler
//! `ToBeDeletedByClusterAutoscaler` taint). [`Health`] shares it between the sync loop and
//! the servers; [`serve`] answers the three paths (`/readyz`, the agent's own, turns ready
//! after the first complete sync); [`ServiceHealthServers`] keeps one listener per
//! `healthCheckNodePort`.
//!
//! The port is public (`0.0.0.0:10256` by default), so it answers with kube-proxy's bodies and
//! nothing else: why the agent is unhealthy goes to the log and to `/metrics`, never to
//! whoever asks.

use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::model::cluster::{Family, ServiceRef};
use crate::model::desired::HealthCheckAddresses;
use crate::model::endpoints::HealthCheck;
use crate::model::plan::Op;
use crate::sync::Report;
use crate::web::{self, Request, Response};

/// The taint the cluster autoscaler puts on a node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// The proxy's health, without a clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHealth {
    timeout: Duration,
    last_updated: BTreeMap<Family, SystemTime>,
    oldest_queued: BTreeMap<Family, SystemTime>,
    node_eligible: bool,
    blocked: Option<String>,
    /// A complete sync has programmed the node (see [`ProxyHealth::synced_completely`]).
    ready: bool,
}

/// One health verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Every family is healthy.
    pub healthy: bool,
    /// The latest successful sync of any family, or, when unhealthy, that of the family
    /// found stuck; `None` before the first.
    pub last_updated: Option<SystemTime>,
}

impl ProxyHealth {
    /// A fresh state: `timeout` is kube-proxy's `healthTimeout` (2 × `ipvs.syncPeriod`).
    /// Healthy, and the node eligible, until told otherwise.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            last_updated: BTreeMap::new(),
            oldest_queued: BTreeMap::new(),
            node_eligible: true,
            blocked: None,
            ready: false,
        }
    }

    /// A sync of `family` was asked for at `now`. Only the oldest pending request counts.
    pub fn queued_update(&mut self, family: Family, now: SystemTime) {
        self.oldest_queued.entry(family).or_insert(now);
    }

    /// A sync of `family` succeeded at `now` (also called once when the loop starts).
    pub fn updated(&mut self, family: Family, now: SystemTime) {
        self.oldest_queued.remove(&family);
        self.last_updated.insert(family, now);
    }

    /// Sets node eligibility from the Node object: ineligible while it is being deleted or
    /// carries [`TO_BE_DELETED_TAINT`].
    pub fn sync_node(&mut self, deleting: bool, taint_keys: &[&str]) {
        self.node_eligible = !deleting && !taint_keys.contains(&TO_BE_DELETED_TAINT);
    }

    /// A sync that read the kernel and wrote the rules has run, over the source's complete
    /// list: from now on `/readyz` is 200 (while the kernel can be programmed).
    pub fn synced_completely(&mut self) {
        self.ready = true;
    }

    /// The sync loop cannot program the kernel at all (`Some(why)`), or can again (`None`).
    /// While it cannot, the proxy is unhealthy at once, whatever the timeout. The reason is
    /// kept for the agent's own use (the log, `/metrics`); the bodies never show it.
    pub fn set_blocked(&mut self, reason: Option<&str>) {
        self.blocked = reason.map(str::to_string);
    }

    /// Why the kernel cannot be programmed at all, if it cannot.
    pub fn blocked(&self) -> Option<&str> {
        self.blocked.as_deref()
    }

    /// Whether the node may receive load-balancer traffic.
    pub fn node_eligible(&self) -> bool {
        self.node_eligible
    }

    /// kube-proxy's `isHealthy`: only families that have synced at least once are judged;
    /// one is unhealthy when a sync queued since its last success has waited `timeout`.
    /// The agent also is unhealthy while it cannot program the kernel at all.
    pub fn verdict(&self, now: SystemTime) -> Verdict {
        let mut latest: Option<SystemTime> = None;
        if self.blocked.is_some() {
            return Verdict {
                healthy: false,
                last_updated: self.last_updated.values().max().copied(),
            };
        }
        for (family, updated) in &self.last_updated {
            latest = latest.max(Some(*updated));
            if let Some(queued) = self.oldest_queued.get(family)
                && now.duration_since(*queued).unwrap_or_default() >= self.timeout
            {
                return Verdict {
                    healthy: false,
                    last_updated: Some(*updated),
                };
            }
        }
        Verdict {
            healthy: true,
            last_updated: latest,
        }
    }

    /// `/healthz`: the status code and kube-proxy's body
    /// `{"lastUpdated": "...","currentTime": "...", "nodeEligible": true}`. When healthy,
    /// `lastUpdated` is the current time, as kube-proxy reports it for old clients.
    pub fn healthz(&self, now: SystemTime) -> (u16, String) {
        let v = self.verdict(now);
        let healthy = v.healthy && self.node_eligible;
        let last = if healthy { Some(now) } else { v.last_updated };
        (
            if healthy { 200 } else { 503 },
            format!(
                "{{\"lastUpdated\": {},\"currentTime\": {}, \"nodeEligible\": {}}}",
                go_time_json(last),
                go_time_json(Some(now)),
                self.node_eligible,
            ),
        )
    }

    /// `/livez`: as `/healthz` without node eligibility, and without it in the body.
    pub fn livez(&self, now: SystemTime) -> (u16, String) {
        let v = self.verdict(now);
        let last = if v.healthy { Some(now) } else { v.last_updated };
        (
            if v.healthy { 200 } else { 503 },
            format!(
                "{{\"lastUpdated\": {},\"currentTime\": {}}}",
                go_time_json(last),
                go_time_json(Some(now)),
            ),
        )
    }

    /// `/readyz`, the agent's own: 200 once a complete sync has programmed the node and while
    /// the kernel can be programmed, else 503, so that a DaemonSet's rollout waits until the
    /// node is served. kube-proxy has no such path; the body is plain text, as the API
    /// server's `/readyz`.
    pub fn readyz(&self) -> (u16, &'static str) {
        if self.ready && self.blocked.is_none() {
            (200, "ok")
        } else if self.ready {
            (503, "the kernel cannot be programmed")
        } else {
            (503, "waiting for the first complete sync")
        }
    }
}

/// A time as Go's `%q` of a `time.Time` prints it, in UTC:
/// `"2024-05-06 07:08:09.123456789 +0000 UTC"`; `None` is Go's zero time.
pub fn go_time_json(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return "\"0001-01-01 00:00:00 +0000 UTC\"".into();
    };
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86400, secs % 86400);
    let (y, m, day) = civil_from_days(days as i64);
    let nanos = d.subsec_nanos();
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{}", format!("{nanos:09}").trim_end_matches('0'))
    };
    format!(
        "\"{y:04}-{m:02}-{day:02} {:02}:{:02}:{:02}{frac} +0000 UTC\"",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// [`ProxyHealth`] shared between the sync loop, the Node watch and the servers, on the
/// system clock.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<Mutex<ProxyHealth>>,
    families: Vec<Family>,
}

impl Health {
    /// Health for the agent's `families` with kube-proxy's timeout (2 × sync period).
    pub fn new(families: &[Family], timeout: Duration) -> Self {
        Self {
            state: Arc::new(Mutex::new(ProxyHealth::new(timeout))),
            families: families.to_vec(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ProxyHealth> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A sync was asked for (every family: one sync programs them all).
    pub fn queued_update(&self) {
        let now = SystemTime::now();
        let mut s = self.lock();
        for f in &self.families {
            s.queued_update(*f, now);
        }
    }

    /// A sync succeeded (call also once when the loop starts, as kube-proxy does).
    pub fn updated(&self) {
        let now = SystemTime::now();
        let mut s = self.lock();
        for f in &self.families {
            s.updated(*f, now);
        }
    }

    /// See [`ProxyHealth::set_blocked`].
    pub fn set_blocked(&self, reason: Option<&str>) {
        self.lock().set_blocked(reason);
    }

    /// The Node changed: see [`ProxyHealth::sync_node`].
    pub fn sync_node(&self, deleting: bool, taint_keys: &[&str]) {
        self.lock().sync_node(deleting, taint_keys);
    }

    /// kube-proxy's `IsHealthy()`, without node eligibility.
    pub fn is_healthy(&self) -> bool {
        self.lock().verdict(SystemTime::now()).healthy
    }

    /// Records what a sync did. As in kube-proxy, a sync counts as done when the rules were
    /// written, even if some objects failed (they are retried and logged); only a sync that
    /// could program nothing at all makes the agent unhealthy ([`Health::set_blocked`]). The
    /// first such sync that read the kernel (a full one) makes the agent ready.
    pub fn record(&self, report: &Report) {
        let rules_written = !report
            .applied
            .failures(&report.plan)
            .any(|(op, _)| matches!(op, Op::WriteRules { .. }));
        if rules_written {
            self.updated();
            if report.full {
                self.lock().synced_completely();
            }
        }
    }

    /// A copy of the state, for tests and `/configz`-like dumps.
    pub fn snapshot(&self) -> ProxyHealth {
        self.lock().clone()
    }
}

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
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn health_state_machine() {
        // (name, steps, now, expected /healthz code, expected /livez code)
        enum Step {
            Queued(Family, u64),
            Updated(Family, u64),
            Node(bool, &'static [&'static str]),
        }
        use Family::{V4, V6};
        use Step::*;
        let cases: &[(&str, &[Step], u64, u16, u16)] = &[
            ("nothing queued, starting up", &[], 0, 200, 200),
            (
                "queued before the first update is not judged",
                &[Queued(V4, 0)],
                500,
                200,
                200,
            ),
            ("synced", &[Updated(V4, 0)], 10, 200, 200),
            (
                "queued, not late yet",
                &[Updated(V4, 0), Queued(V4, 10)],
                69,
                200,
                200,
            ),
            (
                "queued and late",
                &[Updated(V4, 0), Queued(V4, 10)],
                70,
                503,
                503,
            ),
            (
                "late then synced",
                &[Updated(V4, 0), Queued(V4, 10), Updated(V4, 80)],
                80,
                200,
                200,
            ),
            (
                "only the oldest queue time counts",
                &[Updated(V4, 0), Queued(V4, 10), Queued(V4, 60)],
                75,
                503,
                503,
            ),
            (
                "one family stuck is enough",
                &[
                    Updated(V4, 0),
                    Updated(V6, 0),
                    Queued(V6, 5),
                    Updated(V4, 60),
                ],
                65,
                503,
                503,
            ),
            (
                "node being deleted",
                &[Updated(V4, 0), Node(true, &[])],
                1,
                503,
                200,
            ),
            (
                "autoscaler taint",
                &[
                    Updated(V4, 0),
                    Node(false, &["ToBeDeletedByClusterAutoscaler"]),
                ],
                1,
                503,
                200,
            ),
            (
                "other taints",
                &[
                    Updated(V4, 0),
                    Node(false, &["node.kubernetes.io/unschedulable"]),
                ],
                1,
                200,
                200,
            ),
            (
                "node back",
                &[Updated(V4, 0), Node(true, &[]), Node(false, &[])],
                1,
                200,
                200,
            ),
            (
                "just short of the timeout",
                &[Updated(V4, 0), Queued(V4, 0)],
                59,
                200,
                200,
            ),
            (
                "at the timeout",
                &[Updated(V4, 0), Queued(V4, 0)],
                60,
                503,
                503,
            ),
        ];
        for (name, steps, now, healthz, livez) in cases {
            let mut h = ProxyHealth::new(Duration::from_secs(60));
            for s in steps.iter() {
                match s {
                    Queued(f, at) => h.queued_update(*f, t(*at)),
                    Updated(f, at) => h.updated(*f, t(*at)),
                    Node(deleting, taints) => h.sync_node(*deleting, taints),
                }
            }
            assert_eq!(h.healthz(t(*now)).0, *healthz, "{name}: healthz");
            assert_eq!(h.livez(t(*now)).0, *livez, "{name}: livez");
        }
    }

    #[test]
    fn a_blocked_agent_is_unhealthy_at_once_and_tells_no_one_why() {
        let mut h = ProxyHealth::new(Duration::from_secs(60));
        h.updated(Family::V4, t(0));
        let reason = "add service TCP 10.96.0.1:443 \"fo\": no such scheduler";
        h.set_blocked(Some(reason));
        assert_eq!(h.blocked(), Some(reason));
        // The public port shows kube-proxy's keys and nothing else: no address, no error.
        let (code, body) = h.healthz(t(1));
        assert_eq!(code, 503);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["currentTime", "lastUpdated", "nodeEligible"],
            "{body}"
        );
        assert_eq!(v["lastUpdated"], "2023-11-14 22:13:20 +0000 UTC");
        let (code, body) = h.livez(t(1));
        assert_eq!(code, 503);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["currentTime", "lastUpdated"], "{body}");
        for body in [h.healthz(t(1)).1, h.livez(t(1)).1, h.readyz().1.to_string()] {
            assert!(!body.contains("10.96.0.1"), "{body}");
            assert!(!body.contains("scheduler"), "{body}");
        }
        h.set_blocked(None);
        let (code, _) = h.healthz(t(2));
        assert_eq!(code, 200);
    }

    fn report(full: bool, rules_fail: bool) -> Report {
        use crate::model::kernel::Rules;
        use crate::model::plan::Plan;
        let mut report = Report {
            full,
            plan: Plan {
                ops: vec![Op::WriteRules {
                    family: Family::V4,
                    rules: Box::new(Rules::default()),
                    missing_jumps: Vec::new(),
                }],
                warnings: Vec::new(),
            },
            ..Report::default()
        };
        if rules_fail {
            report
                .applied
                .failed
                .push((0, crate::dataplane::Error::NotSingle));
        } else {
            report.applied.done = 1;
        }
        report
    }

    #[test]
    fn ready_after_the_first_full_sync_that_wrote_the_rules_and_while_not_blocked() {
        let h = Health::new(&[Family::V4], Duration::from_secs(60));
        assert_eq!(h.snapshot().readyz().0, 503, "before any sync");
        h.record(&report(true, true));
        assert_eq!(h.snapshot().readyz().0, 503, "the rules were not written");
        h.record(&report(false, false));
        assert_eq!(
            h.snapshot().readyz().0,
            503,
            "a partial sync is not complete"
        );
        h.record(&report(true, false));
        assert_eq!(h.snapshot().readyz().0, 200);
        h.set_blocked(Some("no virtual server could be made"));
        assert_eq!(h.snapshot().readyz().0, 503);
        h.set_blocked(None);
        // A later failing sync does not undo readiness: /healthz judges that.
        h.record(&report(false, true));
        assert_eq!(h.snapshot().readyz(), (200, "ok"));
    }

    #[test]
    fn a_sync_whose_rules_failed_does_not_count_as_an_update() {
        let h = Health::new(&[Family::V4], Duration::from_secs(60));
        h.record(&report(true, true));
        assert!(h.snapshot().last_updated.is_empty());
        h.record(&report(false, false));
        assert_eq!(h.snapshot().last_updated.len(), 1);
    }

    #[test]
    fn kube_proxy_bodies() {
        let mut h = ProxyHealth::new(Duration::from_secs(60));
        h.updated(Family::V4, t(0));
        let (code, body) = h.healthz(t(5));
        assert_eq!(code, 200);
        // Healthy: lastUpdated is reported as now.
        assert_eq!(
            body,
            "{\"lastUpdated\": \"2023-11-14 22:13:25 +0000 UTC\",\"currentTime\": \"2023-11-14 22:13:25 +0000 UTC\", \"nodeEligible\": true}"
        );
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["nodeEligible"], true);
        h.queued_update(Family::V4, t(1));
        let (code, body) = h.healthz(t(61));
        assert_eq!(code, 503);
        assert_eq!(
            body,
            "{\"lastUpdated\": \"2023-11-14 22:13:20 +0000 UTC\",\"currentTime\": \"2023-11-14 22:14:21 +0000 UTC\", \"nodeEligible\": true}"
        );
        let (code, body) = h.livez(t(61));
        assert_eq!(code, 503);
        assert_eq!(
            body,
            "{\"lastUpdated\": \"2023-11-14 22:13:20 +0000 UTC\",\"currentTime\": \"2023-11-14 22:14:21 +0000 UTC\"}"
        );
        let fresh = ProxyHealth::new(Duration::from_secs(60));
        let mut stuck = fresh.clone();
        stuck.sync_node(true, &[]);
        assert!(
            stuck
                .healthz(t(0))
                .1
                .contains("\"lastUpdated\": \"0001-01-01 00:00:00 +0000 UTC\"")
        );
    }

    #[test]
    fn go_time_format() {
        assert_eq!(
            go_time_json(Some(UNIX_EPOCH)),
            "\"1970-01-01 00:00:00 +0000 UTC\""
        );
        assert_eq!(
            go_time_json(Some(UNIX_EPOCH + Duration::new(951_782_400, 120_000_000))),
            "\"2000-02-29 00:00:00.12 +0000 UTC\""
        );
        assert_eq!(
            go_time_json(Some(UNIX_EPOCH + Duration::new(4_102_444_799, 1))),
            "\"2099-12-31 23:59:59.000000001 +0000 UTC\""
        );
    }

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
