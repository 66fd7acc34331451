//! kube-proxy's `ProxyHealthServer` as a pure state machine (time is an argument): per IP
//! family, the last successful sync and the oldest sync queued since, the node's eligibility,
//! and the bodies of `/healthz`, `/livez` and `/readyz` it gives.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::go_time_json;
use crate::model::snapshot::cluster::Family;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

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
}
