//! The cluster as the agent sees it: Services, EndpointSlices and its own Node, already
//! validated and converted from the API types (see `k8s::convert`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ipnet::IpNet;

/// A transport protocol a Service port can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The lower-case name used by ipset and iptables (`tcp`, `udp`, `sctp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

/// Namespace and name of a Service.
///
/// Shared strings: the maps of a snapshot key each object by a clone of its reference, and
/// a slice names its Service's, so a clone costs a count, not two allocations (four copies
/// of a Service's namespace and name were a sixth of a snapshot).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceRef {
    /// The namespace.
    pub namespace: Arc<str>,
    /// The name.
    pub name: Arc<str>,
}

impl ServiceRef {
    /// A reference from its parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Service's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceType {
    /// Reachable on its cluster IPs (and external IPs).
    ClusterIp,
    /// Also on every node address at its node ports.
    NodePort,
    /// Also on its load-balancer ingress IPs.
    LoadBalancer,
    /// A DNS alias: nothing for a proxy to do.
    ExternalName,
}

/// Whether traffic may go to endpoints on any node or only to this node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrafficPolicy {
    /// Any endpoint in the cluster.
    #[default]
    Cluster,
    /// Only endpoints on this node.
    Local,
}

/// One port of a Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// The port's name (empty for a single unnamed port); EndpointSlice ports match on it.
    pub name: String,
    /// Its protocol.
    pub protocol: Protocol,
    /// The port on the cluster IPs, external IPs and load-balancer IPs.
    pub port: u16,
    /// The node port, for NodePort and LoadBalancer Services.
    pub node_port: Option<u16>,
}

/// A Service, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Namespace and name.
    pub id: ServiceRef,
    /// Its type.
    pub kind: ServiceType,
    /// Its cluster IPs (one per family); empty for a headless Service.
    pub cluster_ips: Vec<IpAddr>,
    /// Its ports.
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// Load-balancer ingress IPs in VIP mode (`ipMode: Proxy` entries are left out).
    pub load_balancer_ips: Vec<IpAddr>,
    /// `sessionAffinity: ClientIP` with its timeout.
    pub session_affinity: Option<Duration>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: TrafficPolicy,
    /// `spec.internalTrafficPolicy`.
    pub internal_traffic_policy: TrafficPolicy,
    /// `spec.healthCheckNodePort`.
    pub health_check_node_port: Option<u16>,
    /// `spec.loadBalancerSourceRanges`.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// A per-Service IPVS scheduler from the [`SCHEDULER_ANNOTATION`] (or kube-router's)
    /// annotation, overriding `--ipvs-scheduler`.
    pub scheduler: Option<String>,
}

/// The annotation that picks a Service's own IPVS scheduler (`sh`, `mh`, `lc`...).
pub const SCHEDULER_ANNOTATION: &str = "kube-proxy-ipvs.io/scheduler";
/// kube-router's annotation of the same meaning, honoured so its users keep their setup.
pub const KUBE_ROUTER_SCHEDULER_ANNOTATION: &str = "kube-router.io/service.scheduler";

/// One port of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointPort {
    /// Matches the Service port of the same name.
    pub name: String,
    /// Its protocol.
    pub protocol: Protocol,
    /// The port on the endpoint.
    pub port: u16,
}

/// A name that many objects repeat (node names, zones), one shared copy of it ([`intern`]),
/// held by a thin pointer: 8 bytes where an `Arc<str>` takes 16, and every endpoint holds
/// two (4 MiB at 50,000 Services of five endpoints).
pub type SharedName = Arc<String>;

/// The one shared copy of a name that many objects repeat (node names, zones): endpoints hold
/// it by pointer instead of each its own string. The table only grows, by the cluster's nodes
/// and zones.
pub fn intern(name: &str) -> SharedName {
    static NAMES: std::sync::LazyLock<
        std::sync::Mutex<std::collections::HashMap<String, SharedName>>,
    > = std::sync::LazyLock::new(Default::default);
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(n) = names.get(name) {
        return n.clone();
    }
    let n = Arc::new(name.to_owned());
    names.insert(name.to_owned(), n.clone());
    n
}

/// One endpoint (a pod) of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its address (the slice's family).
    pub address: IpAddr,
    /// `conditions.ready` (absent means ready).
    pub ready: bool,
    /// `conditions.serving` (absent means serving, as kube-proxy reads it).
    pub serving: bool,
    /// `conditions.terminating` (absent means false).
    pub terminating: bool,
    /// The node it runs on (shared: a cluster has far fewer nodes than endpoints).
    pub node_name: Option<SharedName>,
    /// Its zone (shared, as the node name).
    pub zone: Option<SharedName>,
    /// `hints`, when it has any (boxed: few endpoints have hints, and two empty lists in
    /// each of a cluster's endpoints were 40% of its size).
    pub hints: Option<Box<EndpointHints>>,
}

/// The topology hints of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointHints {
    /// `hints.forZones`.
    pub zones: Vec<String>,
    /// `hints.forNodes`.
    pub nodes: Vec<String>,
}

impl Endpoint {
    /// The node it runs on.
    pub fn node(&self) -> Option<&str> {
        self.node_name.as_deref().map(String::as_str)
    }

    /// `hints.forZones` (empty without hints).
    pub fn zone_hints(&self) -> &[String] {
        self.hints.as_deref().map_or(&[], |h| &h.zones)
    }

    /// `hints.forNodes` (empty without hints).
    pub fn node_hints(&self) -> &[String] {
        self.hints.as_deref().map_or(&[], |h| &h.nodes)
    }
}

/// What identifies an EndpointSlice: its namespace (its Service's) and its own name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SliceRef {
    /// The namespace (shared, as [`ServiceRef`]'s).
    pub namespace: Arc<str>,
    /// The slice's own name.
    pub name: Arc<str>,
}

impl SliceRef {
    /// A reference from its parts.
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for SliceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// An EndpointSlice, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSlice {
    /// The slice's own name (shared with its [`SliceRef`]).
    pub name: Arc<str>,
    /// The Service it belongs to (`kubernetes.io/service-name`).
    pub service: ServiceRef,
    /// Its address family.
    pub family: Family,
    /// Its ports.
    pub ports: Vec<EndpointPort>,
    /// Its endpoints.
    pub endpoints: Vec<Endpoint>,
    /// `endpoints.kubernetes.io/last-change-trigger-time`: when the change this version of
    /// the slice carries was triggered (the start of the network-programming latency).
    pub trigger_time: Option<SystemTime>,
}

impl EndpointSlice {
    /// What identifies the slice.
    pub fn id(&self) -> SliceRef {
        SliceRef::new(self.service.namespace.clone(), self.name.clone())
    }
}

/// The agent's own Node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// Its addresses from `status.addresses` (InternalIP first).
    pub addresses: Vec<IpAddr>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Vec<IpNet>,
    /// Its labels (topology zone among them).
    pub labels: BTreeMap<String, String>,
}

/// An ordered map of shared objects whose copies share their structure (imbl's persistent
/// B-tree): a snapshot of the cluster is cloned in O(1), a change copies only the path to
/// its key, and two snapshots a change apart are compared and dropped in what changed.
/// `std`'s map copied, walked and freed every key of the cluster on each change.
pub type ObjectMap<K, V> = imbl::OrdMap<K, Arc<V>>;

/// Everything the desired state is computed from, besides the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Services by namespace and name. Shared: snapshots taken one after the other hold the
    /// unchanged objects once, and tell them unchanged by pointer.
    pub services: ObjectMap<ServiceRef, Service>,
    /// EndpointSlices by namespace and slice name, shared as the Services are.
    pub slices: ObjectMap<SliceRef, EndpointSlice>,
    /// The agent's Node, when known.
    pub node: Option<Node>,
}

impl Cluster {
    /// The slices of one Service.
    pub fn slices_of<'a>(
        &'a self,
        id: &'a ServiceRef,
    ) -> impl Iterator<Item = &'a EndpointSlice> + 'a {
        self.slices
            .range(SliceRef::new(id.namespace.clone(), String::new())..)
            .take_while(move |(slice, _)| slice.namespace == id.namespace)
            .map(|(_, s)| &**s)
            .filter(move |s| s.service == *id)
    }

    /// The slices grouped by their Service, for a pass over every Service: asking
    /// [`Cluster::slices_of`] for each one scans its whole namespace every time, quadratic in
    /// a namespace of 10,000 Services.
    pub fn slices_by_service(&self) -> SlicesByService<'_> {
        let mut by = BTreeMap::<&ServiceRef, Vec<&EndpointSlice>>::new();
        for slice in self.slices.values() {
            by.entry(&slice.service).or_default().push(slice);
        }
        SlicesByService(by)
    }

    /// The slices of the Services `ids` alone, grouped as [`Cluster::slices_by_service`]
    /// groups them: one pass over the slices, cheap per slice (a change of one Service, the
    /// common case, costs one equality test each).
    pub fn slices_of_services(&self, ids: &BTreeSet<ServiceRef>) -> SlicesByService<'_> {
        let mut by = BTreeMap::<&ServiceRef, Vec<&EndpointSlice>>::new();
        let only = (ids.len() == 1).then(|| ids.first()).flatten();
        // A slice lives in its Service's namespace: only those namespaces are looked through.
        let namespaces: BTreeSet<&Arc<str>> = ids.iter().map(|id| &id.namespace).collect();
        for namespace in namespaces {
            let slices = self
                .slices
                .range(SliceRef::new(namespace.clone(), "")..)
                .take_while(|(slice, _)| slice.namespace == *namespace)
                .map(|(_, slice)| slice);
            for slice in slices {
                let wanted = match only {
                    Some(id) => slice.service == *id,
                    None => ids.contains(&slice.service),
                };
                if wanted {
                    by.entry(&slice.service).or_default().push(slice);
                }
            }
        }
        SlicesByService(by)
    }

    /// Every address family in use by some Service.
    pub fn families(&self) -> BTreeSet<Family> {
        self.services
            .values()
            .flat_map(|s| s.cluster_ips.iter().map(Family::of))
            .collect()
    }
}

/// Calls `f(before, after)` for every key whose object differs between two maps of shared
/// objects (`None` on the side that lacks the key), in key order. The same object (by
/// pointer, as unchanged objects are shared between snapshots) or an equal one is no
/// difference; the parts of the two maps they share are skipped whole, so two snapshots a
/// change apart cost what changed.
pub fn each_difference<'a, K: Ord + Clone, V: PartialEq>(
    before: &'a ObjectMap<K, V>,
    after: &'a ObjectMap<K, V>,
    mut f: impl FnMut(Option<&'a V>, Option<&'a V>),
) {
    use imbl::ordmap::DiffItem;
    for item in before.diff(after) {
        match item {
            DiffItem::Add(_, a) => f(None, Some(&**a)),
            DiffItem::Remove(_, b) => f(Some(&**b), None),
            DiffItem::Update {
                old: (_, b),
                new: (_, a),
            } => {
                if !(Arc::ptr_eq(b, a) || b == a) {
                    f(Some(&**b), Some(&**a));
                }
            }
        }
    }
}

/// [`each_difference`] with the key: calls `f(key, before, after)` for every key whose
/// object differs, each side's shared object as the map holds it.
pub fn each_difference_by_key<'a, K: Ord + Clone, V: PartialEq>(
    before: &'a ObjectMap<K, V>,
    after: &'a ObjectMap<K, V>,
    mut f: impl FnMut(&'a K, Option<&'a Arc<V>>, Option<&'a Arc<V>>),
) {
    use imbl::ordmap::DiffItem;
    for item in before.diff(after) {
        match item {
            DiffItem::Add(k, a) => f(k, None, Some(a)),
            DiffItem::Remove(k, b) => f(k, Some(b), None),
            DiffItem::Update {
                old: (k, b),
                new: (_, a),
            } => {
                if !(Arc::ptr_eq(b, a) || b == a) {
                    f(k, Some(b), Some(a));
                }
            }
        }
    }
}

/// EndpointSlices grouped by Service ([`Cluster::slices_by_service`]), each group in the order
/// of [`Cluster::slices`].
#[derive(Debug, Default)]
pub struct SlicesByService<'a>(BTreeMap<&'a ServiceRef, Vec<&'a EndpointSlice>>);

impl<'a> SlicesByService<'a> {
    /// Slices already grouped, each group in the order of [`Cluster::slices`].
    pub(crate) fn from_groups(groups: BTreeMap<&'a ServiceRef, Vec<&'a EndpointSlice>>) -> Self {
        Self(groups)
    }

    /// The slices of one Service (as [`Cluster::slices_of`] yields them).
    pub fn of(&self, id: &ServiceRef) -> &[&'a EndpointSlice] {
        self.0.get(id).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every slice held, Service by Service.
    pub fn all(&self) -> impl Iterator<Item = &'a EndpointSlice> + '_ {
        self.0.values().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{cluster, eps, svc};
    use crate::model::snapshot::changes::Changes;

    /// The Services [`Changes::between`] names, or `None` when the Node changed.
    fn changed_services(before: &Cluster, after: &Cluster) -> Option<BTreeSet<ServiceRef>> {
        let changes = Changes::between(before, after);
        (!changes.node_changed()).then(|| changes.services().clone())
    }

    #[test]
    fn an_endpoint_is_48_bytes_and_shares_its_node_and_zone() {
        // A snapshot holds one per pod behind every Service.
        assert_eq!(std::mem::size_of::<Endpoint>(), 48);
        let (a, b) = (intern("node-x"), intern("node-x"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.as_str(), "node-x");
        assert!(!Arc::ptr_eq(&a, &intern("node-y")));
    }

    #[test]
    fn changed_services_are_those_whose_object_or_slices_moved() {
        let before = cluster(
            vec![svc("a"), svc("b"), svc("c")],
            vec![
                eps("a", "p", Protocol::Tcp, 80).ready("10.244.0.1", "n"),
                eps("b", "p", Protocol::Tcp, 80).ready("10.244.0.2", "n"),
            ],
        );
        let mut after = before.clone();
        assert_eq!(changed_services(&before, &after), Some(BTreeSet::new()));
        // a's slice changes, c goes, d comes.
        let a = after
            .slices
            .iter()
            .find(|(_, s)| &*s.service.name == "a")
            .unwrap()
            .0
            .clone();
        Arc::make_mut(after.slices.get_mut(&a).unwrap())
            .endpoints
            .clear();
        after.services.remove(&ServiceRef::new("default", "c"));
        let d = svc("d");
        after.services.insert(d.0.id.clone(), Arc::new(d.0));
        let names: Vec<String> = changed_services(&before, &after)
            .unwrap()
            .into_iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(names, ["a", "c", "d"]);
        after.node = Some(Node::default());
        assert_eq!(changed_services(&before, &after), None);
    }

    /// The lookups the walk replaced: every key of each side looked up in the other.
    fn changed_by_lookups(before: &Cluster, after: &Cluster) -> BTreeSet<ServiceRef> {
        let mut changed = BTreeSet::new();
        for (id, s) in &after.services {
            if before.services.get(id) != Some(s) {
                changed.insert(id.clone());
            }
        }
        for id in before.services.keys() {
            if !after.services.contains_key(id) {
                changed.insert(id.clone());
            }
        }
        for (key, s) in &after.slices {
            match before.slices.get(key) {
                Some(b) if b == s => {}
                Some(b) => {
                    changed.insert(b.service.clone());
                    changed.insert(s.service.clone());
                }
                None => {
                    changed.insert(s.service.clone());
                }
            }
        }
        for (key, b) in &before.slices {
            if !after.slices.contains_key(key) {
                changed.insert(b.service.clone());
            }
        }
        changed
    }

    proptest::proptest! {
        #[test]
        fn the_walk_finds_what_lookups_find(
            start in proptest::collection::vec(crate::model::incremental::tests::change(), 0..12),
            then in proptest::collection::vec(crate::model::incremental::tests::change(), 0..6),
        ) {
            let mut before = cluster(vec![], vec![]);
            let mut events = Changes::default();
            for c in &start {
                crate::model::incremental::tests::apply(&mut before, c, &mut events);
            }
            let mut after = before.clone();
            let mut events = Changes::default();
            for c in &then {
                crate::model::incremental::tests::apply(&mut after, c, &mut events);
            }
            let walked = Changes::between(&before, &after);
            proptest::prop_assert_eq!(
                (!walked.node_changed()).then(|| walked.services().clone()),
                (before.node == after.node).then(|| changed_by_lookups(&before, &after))
            );
            // What the events recorded names at least what differs (a change undone within
            // the batch is named too).
            proptest::prop_assert!(walked.services().is_subset(events.services()));
            proptest::prop_assert_eq!(walked.node_changed(), before.node != after.node);
        }
    }

    #[test]
    fn slices_by_service_groups_as_slices_of_finds() {
        let mut other_ns = eps("web", "p", Protocol::Tcp, 80).ready("10.244.0.9", "node-a");
        other_ns.0.service = ServiceRef::new("prod", "web");
        // A slice whose name does not start with its Service's.
        let mut odd_name = eps("web", "q", Protocol::Tcp, 81).ready("10.244.0.8", "node-a");
        odd_name.0.name = "zzz-mirrored".into();
        let c = cluster(
            vec![svc("web"), svc("api"), svc("idle")],
            vec![
                eps("web", "p", Protocol::Tcp, 80).ready("10.244.0.2", "node-a"),
                eps("api", "p", Protocol::Tcp, 80).ready("10.244.0.3", "node-a"),
                odd_name,
                other_ns,
            ],
        );
        let by = c.slices_by_service();
        for id in c.services.keys().chain([&ServiceRef::new("prod", "web")]) {
            let want: Vec<&EndpointSlice> = c.slices_of(id).collect();
            assert_eq!(by.of(id), want.as_slice(), "{id}");
        }
        assert_eq!(by.of(&ServiceRef::new("default", "web")).len(), 2);
        assert!(by.of(&ServiceRef::new("default", "idle")).is_empty());
    }
}
