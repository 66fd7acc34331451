//! The soak's churn: a model of the Services and slices it made, and random changes to them
//! applied to the API server on a thread of its own, paused while a check reads the state.
//!
//! Each kind of change keeps its share of the cluster where it was (NodePort Services, two
//! ports, affinity, `Local` policy, Services another proxy owns, endpoints per slice): the
//! population stays alike from the first minute to the last, so memory that grows is a leak,
//! not a bigger cluster.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use peers::scenario::{NAMESPACE, Object};
use serde_json::{Value, json};

use crate::api::Cluster;
use lab::rng::Rng;

/// The share of Services each property keeps.
const NODE_PORT: f64 = 0.15;
const TWO_PORTS: f64 = 0.3;
const AFFINITY: f64 = 0.2;
const LOCAL: f64 = 0.3; // of the NodePort Services
const IGNORED: f64 = 0.02;
/// Endpoints per slice: between these, 3 on average.
const MIN_ENDPOINTS: usize = 1;
const MAX_ENDPOINTS: usize = 5;

/// One Service as the churn made it.
#[derive(Clone, Debug)]
struct Svc {
    node_port: bool,
    two_ports: bool,
    affinity: bool,
    local: bool,
    /// Labelled for another proxy (`service.kubernetes.io/service-proxy-name`).
    ignored: bool,
}

/// One endpoint of a slice.
#[derive(Clone, Debug)]
struct Endpoint {
    address: [u8; 2],
    ready: bool,
    /// On the agent's node (else on another).
    local: bool,
}

/// One slice: the Service its label names, and its endpoints.
#[derive(Clone, Debug)]
struct Slice {
    service: usize,
    endpoints: Vec<Endpoint>,
}

/// The kinds of change, with how often each is picked (of 100).
pub const KINDS: [(&str, usize); 5] = [
    ("endpoints", 45),
    ("service replaced", 15),
    ("slice relabelled", 10),
    ("service relabelled", 10),
    ("service spec", 20),
];

/// The Services and slices the churn made.
pub struct Model {
    node: String,
    services: BTreeMap<usize, Svc>,
    /// Live Service ids, for a pick in constant time.
    ids: Vec<usize>,
    slices: BTreeMap<String, Slice>,
    next_id: usize,
    rng: Rng,
}

fn service_name(id: usize) -> String {
    format!("s{id}")
}

impl Model {
    /// `n` Services, each with one slice, for the node `node`.
    pub fn new(n: usize, node: &str, seed: u64) -> Model {
        let mut m = Model {
            node: node.into(),
            services: BTreeMap::new(),
            ids: Vec::new(),
            slices: BTreeMap::new(),
            next_id: 0,
            rng: Rng::new(seed),
        };
        for _ in 0..n {
            m.add_service();
        }
        m
    }

    fn add_service(&mut self) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        let r = &mut self.rng;
        let node_port = r.chance(NODE_PORT);
        let svc = Svc {
            node_port,
            two_ports: r.chance(TWO_PORTS),
            affinity: r.chance(AFFINITY),
            local: node_port && r.chance(LOCAL),
            ignored: false,
        };
        let count = MIN_ENDPOINTS + r.below(MAX_ENDPOINTS - MIN_ENDPOINTS + 1);
        let endpoints = (0..count).map(|_| self.endpoint()).collect();
        self.services.insert(id, svc);
        self.ids.push(id);
        self.slices.insert(
            format!("s{id}-a"),
            Slice {
                service: id,
                endpoints,
            },
        );
        id
    }

    fn endpoint(&mut self) -> Endpoint {
        let r = &mut self.rng;
        Endpoint {
            address: [r.below(250) as u8, 1 + r.below(254) as u8],
            ready: r.chance(0.9),
            local: r.chance(0.25),
        }
    }

    /// Every object, for the first apply.
    pub fn objects(&self) -> Vec<Object> {
        let mut out: Vec<Object> = self.ids.iter().map(|id| self.service(*id)).collect();
        out.extend(self.slices.keys().map(|name| self.slice(name)));
        out
    }

    fn service(&self, id: usize) -> Object {
        let s = &self.services[&id];
        let name = service_name(id);
        let mut ports =
            vec![json!({"name": "p0", "port": 80, "targetPort": 8080, "protocol": "TCP"})];
        if s.two_ports {
            ports.push(json!({"name": "p1", "port": 53, "targetPort": 5353, "protocol": "UDP"}));
        }
        let mut spec = json!({
            "type": if s.node_port { "NodePort" } else { "ClusterIP" },
            "ports": ports,
            "sessionAffinity": if s.affinity { "ClientIP" } else { "None" },
        });
        if s.node_port {
            spec["externalTrafficPolicy"] = if s.local { "Local" } else { "Cluster" }.into();
        }
        let mut labels = json!({"soak": "yes"});
        if s.ignored {
            labels["service.kubernetes.io/service-proxy-name"] = "elsewhere".into();
        }
        Object {
            kind: "Service".into(),
            namespace: NAMESPACE.into(),
            name: name.clone(),
            body: json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": spec,
            }),
        }
    }

    fn slice(&self, name: &str) -> Object {
        let s = &self.slices[name];
        let endpoints: Vec<Value> = s
            .endpoints
            .iter()
            .map(|e| {
                json!({
                    "addresses": [format!("10.244.{}.{}", e.address[0], e.address[1])],
                    "conditions": {"ready": e.ready},
                    "nodeName": if e.local { self.node.as_str() } else { "soak-elsewhere" },
                })
            })
            .collect();
        Object {
            kind: "EndpointSlice".into(),
            namespace: NAMESPACE.into(),
            name: name.into(),
            body: json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "labels": {"kubernetes.io/service-name": service_name(s.service)},
                },
                "addressType": "IPv4",
                "ports": [
                    {"name": "p0", "port": 8080, "protocol": "TCP"},
                    {"name": "p1", "port": 5353, "protocol": "UDP"},
                ],
                "endpoints": endpoints,
            }),
        }
    }

    fn pick_service(&mut self) -> usize {
        self.ids[self.rng.below(self.ids.len())]
    }

    fn pick_slice(&mut self) -> String {
        let i = self.rng.below(self.slices.len());
        self.slices.keys().nth(i).cloned().unwrap_or_default()
    }

    /// Flips one Service's property so that its share moves toward `share`.
    fn rebalance(
        &mut self,
        has: impl Fn(&Svc) -> bool + Copy,
        of: impl Fn(&Svc) -> bool + Copy,
        share: f64,
        set: impl Fn(&mut Svc, bool),
    ) -> Option<usize> {
        let among = self.services.values().filter(|s| of(s)).count().max(1);
        let now = self.services.values().filter(|s| of(s) && has(s)).count();
        let grow = (now as f64) < share * among as f64;
        let mut id = None;
        for _ in 0..64 {
            let pick = self.pick_service();
            let s = &self.services[&pick];
            if of(s) && has(s) != grow {
                id = Some(pick);
                break;
            }
        }
        let id = id?;
        set(self.services.get_mut(&id).expect("picked"), grow);
        Some(id)
    }

    /// Picks a change, applies it to the model, and says what to send: objects to apply and
    /// `Kind/name` objects to delete (deleted first).
    pub fn change(&mut self) -> (&'static str, Vec<Object>, Vec<String>) {
        let mut roll = self.rng.below(100);
        let kind = KINDS
            .iter()
            .find(|(_, weight)| {
                let hit = roll < *weight;
                roll = roll.saturating_sub(*weight);
                hit
            })
            .map_or("endpoints", |(k, _)| k);
        match kind {
            "endpoints" => {
                let name = self.pick_slice();
                let len = self.slices[&name].endpoints.len();
                let add = len < MIN_ENDPOINTS || (len < MAX_ENDPOINTS && self.rng.chance(0.5));
                let i = self.rng.below(len.max(1));
                let new = self.endpoint();
                let flip_ready = self.rng.chance(0.3);
                let s = self.slices.get_mut(&name).expect("picked");
                if add {
                    s.endpoints.push(new);
                } else if flip_ready {
                    s.endpoints[i].ready = !s.endpoints[i].ready;
                } else if len > MIN_ENDPOINTS {
                    s.endpoints.remove(i);
                } else {
                    s.endpoints[i] = new;
                }
                (kind, vec![self.slice(&name)], vec![])
            }
            "service replaced" => {
                let id = self.pick_service();
                self.services.remove(&id);
                self.ids.retain(|x| *x != id);
                let gone: Vec<String> = self
                    .slices
                    .iter()
                    .filter(|(_, s)| s.service == id)
                    .map(|(n, _)| n.clone())
                    .collect();
                let mut delete: Vec<String> =
                    gone.iter().map(|n| format!("EndpointSlice/{n}")).collect();
                for n in &gone {
                    self.slices.remove(n);
                }
                delete.push(format!("Service/{}", service_name(id)));
                let new = self.add_service();
                let apply = vec![self.service(new), self.slice(&format!("s{new}-a"))];
                (kind, apply, delete)
            }
            "slice relabelled" => {
                let name = self.pick_slice();
                let to = self.pick_service();
                self.slices.get_mut(&name).expect("picked").service = to;
                (kind, vec![self.slice(&name)], vec![])
            }
            "service relabelled" => {
                let id = self.rebalance(|s| s.ignored, |_| true, IGNORED, |s, v| s.ignored = v);
                let apply = id.map(|id| self.service(id)).into_iter().collect();
                (kind, apply, vec![])
            }
            _ => {
                let id = match self.rng.below(4) {
                    0 => self.rebalance(
                        |s| s.node_port,
                        |_| true,
                        NODE_PORT,
                        |s, v| {
                            s.node_port = v;
                            s.local = false;
                        },
                    ),
                    1 => {
                        self.rebalance(|s| s.two_ports, |_| true, TWO_PORTS, |s, v| s.two_ports = v)
                    }
                    2 => self.rebalance(|s| s.affinity, |_| true, AFFINITY, |s, v| s.affinity = v),
                    _ => self.rebalance(|s| s.local, |s| s.node_port, LOCAL, |s, v| s.local = v),
                };
                let apply = id.map(|id| self.service(id)).into_iter().collect();
                (kind, apply, vec![])
            }
        }
    }
}

/// What the churn did, by kind of change.
#[derive(Default, Debug, Clone)]
pub struct Counts {
    /// Changes the API server took.
    pub done: BTreeMap<&'static str, usize>,
    /// Changes it refused or did not answer (while it restarts), with the first error.
    pub failed: usize,
    pub first_error: Option<String>,
}

impl Counts {
    pub fn total(&self) -> usize {
        self.done.values().sum()
    }
}

/// Shared between the churn's thread and the test.
#[derive(Default)]
pub struct Control {
    pub stop: AtomicBool,
    pub pause: AtomicBool,
    /// Set by the churn while it waits at a pause (no request in flight).
    pub paused: AtomicBool,
    pub counts: Mutex<Counts>,
}

impl Control {
    /// Pauses the churn; returns once no change is in flight.
    pub fn pause(&self) {
        self.pause.store(true, Ordering::SeqCst);
        while !self.paused.load(Ordering::SeqCst) && !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn resume(&self) {
        self.pause.store(false, Ordering::SeqCst);
    }
}

/// Applies `model`'s changes, `per_second` at most, until stopped.
pub fn run(cluster: &Cluster, model: &mut Model, per_second: f64, control: &Control) {
    let gap = Duration::from_secs_f64(1.0 / per_second);
    while !control.stop.load(Ordering::SeqCst) {
        if control.pause.load(Ordering::SeqCst) {
            control.paused.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        control.paused.store(false, Ordering::SeqCst);
        let started = std::time::Instant::now();
        let (kind, apply, delete) = model.change();
        // A failed delete of what is already gone is no failure; another failure leaves the
        // model ahead of the server, which the next change of that object repairs (every
        // apply sends the whole object).
        let deleted = delete
            .iter()
            .all(|d| match cluster.delete(std::slice::from_ref(d)) {
                Ok(()) => true,
                Err(e) => {
                    let text = format!("{e:#}");
                    text.contains("NotFound") || text.contains("not found") || {
                        note_failure(control, &text);
                        false
                    }
                }
            });
        let applied = deleted
            && match cluster.apply(&apply) {
                Ok(()) => true,
                Err(e) => {
                    note_failure(control, &format!("{e:#}"));
                    false
                }
            };
        if applied {
            *control.counts.lock().unwrap().done.entry(kind).or_default() += 1;
        }
        if let Some(rest) = gap.checked_sub(started.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

fn note_failure(control: &Control, error: &str) {
    let mut c = control.counts.lock().unwrap();
    c.failed += 1;
    c.first_error.get_or_insert_with(|| error.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_stay_where_they_started() {
        let mut m = Model::new(2000, "n", 7);
        for _ in 0..20_000 {
            m.change();
        }
        let n = m.services.len() as f64;
        assert_eq!(m.services.len(), 2000);
        let share = |f: fn(&Svc) -> bool| m.services.values().filter(|s| f(s)).count() as f64 / n;
        assert!((share(|s| s.node_port) - NODE_PORT).abs() < 0.03);
        assert!((share(|s| s.two_ports) - TWO_PORTS).abs() < 0.03);
        assert!((share(|s| s.ignored) - IGNORED).abs() < 0.01);
        let endpoints: usize = m.slices.values().map(|s| s.endpoints.len()).sum();
        let per_slice = endpoints as f64 / m.slices.len() as f64;
        assert!((2.5..=3.5).contains(&per_slice), "{per_slice}");
        assert!(
            (1800..=2200).contains(&m.slices.len()),
            "{}",
            m.slices.len()
        );
    }
}
