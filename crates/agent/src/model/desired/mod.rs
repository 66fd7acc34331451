//! The desired kernel state: a pure function of the cluster, the configuration and the host's
//! own addresses.
//!
//! # Layout
//! - `host`: the host's addresses ([`Host`]): which are local, which serve node ports, where
//!   the health-check node ports listen.
//! - `node_settings`: the settings read from the Node object (`resolve_node_settings`).
//! - `builder`: the state in the making, and what derives from all the Services at the end.
//! - `service`: one Service, through each way its ports are exposed (cluster IP, external
//!   IPs, load balancer, node port).
//! - `footprint`: what each Service put in, for [`crate::model::incremental`] to take it out again.
//! - [`iptables`]: the fixed KUBE-* catalogue of chains and rules, in `iptables-restore` form.
//! - [`scheduler`]: which IPVS scheduler a Service's virtual servers get, and when a Service's
//!   own is refused.
//! - [`warning`]: what the desired state and the plan find wrong and work around
//!   ([`Warning`]), told apart by variant.
//! - [`conntrack`]: which UDP conntrack entries are stale once Services or endpoints change.

mod builder;
pub mod conntrack;
mod footprint;
mod host;
pub mod iptables;
mod node_settings;
pub mod scheduler;
mod service;
pub mod warning;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::model::desired::warning::Warning;
use crate::model::kernel::{KernelState, Rules, VsKey};
use crate::model::snapshot::cluster::{Cluster, EndpointSlice, Family, Service};
use crate::model::snapshot::config::{ConnReuse, ProxyConfig};
use builder::Builder;
use iptables::OutFilter;

pub(crate) use footprint::{Footprint, Footprints};
pub use host::{HealthCheckAddresses, Host, LocalAddress, health_check_addresses};
pub(crate) use node_settings::resolve_node_settings;

/// The desired state, with notes on what it could not include.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// The kernel state to reach.
    pub state: KernelState,
    /// Virtual servers by the Service they serve (the cluster's own object, shared: a copy
    /// of its namespace and name per virtual server was a tenth of the state).
    pub owners: BTreeMap<VsKey, Arc<Service>>,
    /// Conflicts found (two Services wanting one virtual server, each a
    /// [`Warning::Contested`]); the first one wins.
    pub conflicts: Vec<Warning>,
    /// Per family, Service ports whose Local traffic policy found no endpoint on this node
    /// while the cluster has some: `(internal, external)` (kube-proxy's
    /// `sync_proxy_rules_no_local_endpoints_total`).
    pub no_local_endpoints: BTreeMap<Family, (u64, u64)>,
}

/// Computes the kernel state for `cluster`.
pub fn desired(cluster: &Cluster, config: &ProxyConfig, host: &Host) -> Desired {
    build(cluster, config, host, false).0
}

/// The desired state, and with `record` what the Services' [`Footprint`]s share (each
/// footprint is counted, then dropped: an update recomputes the old one from the snapshot
/// the state is for) and the virtual servers two Services want.
pub(crate) fn build(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
    record: bool,
) -> (Desired, Footprints) {
    let config = &resolve_node_settings(cluster, config);
    let mut out = Builder::new(config, host);
    let slices = cluster.slices_by_service();
    let mut footprints = Footprints::default();
    for service in cluster.services.values() {
        if record {
            out.record = Some(Footprint::default());
        }
        out.service(cluster, slices.of(&service.id), service);
        if let Some(mut f) = out.record.take() {
            f.dedup();
            footprints.count(&f);
        }
    }
    footprints.contested = std::mem::take(&mut out.contested);
    (out.finish(), footprints)
}

/// Computes the footprints of `services` alone, against the empty state: what each would put
/// in, whatever the others hold. `slices` are those of the Services.
pub(crate) fn footprints_of(
    cluster: &Cluster,
    config: &ProxyConfig,
    host: &Host,
    services: &[(&Arc<Service>, Vec<&EndpointSlice>)],
) -> (Desired, Vec<Footprint>) {
    let config = &resolve_node_settings(cluster, config);
    let mut out = Builder::new(config, host);
    let mut prints = Vec::new();
    for (service, slices) in services {
        out.record = Some(Footprint::default());
        out.service(cluster, slices, service);
        let mut f = out.record.take().unwrap_or_default();
        f.dedup();
        prints.push(f);
    }
    (out.d, prints)
}

/// The rules of `family` for the sets of `state` and the out filters.
pub(crate) fn family_rules(
    family: Family,
    config: &ProxyConfig,
    state: &KernelState,
    out_filters: &BTreeSet<OutFilter>,
) -> Rules {
    iptables::rules(
        family,
        config,
        &state.sets,
        &out_filters
            .iter()
            .filter(|f| Family::of(&f.address) == family)
            .cloned()
            .collect::<Vec<_>>(),
    )
}

/// The sysctls IPVS mode needs.
pub fn sysctls(config: &ProxyConfig) -> BTreeMap<String, String> {
    let mut s: BTreeMap<String, String> = [
        // Without it IPVS detaches its packets from conntrack and MASQUERADE never applies.
        ("net/ipv4/vs/conntrack", "1"),
        ("net/ipv4/vs/expire_nodest_conn", "1"),
        ("net/ipv4/vs/expire_quiescent_template", "1"),
        ("net/ipv4/ip_forward", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // IPv6 forwarding is left as the node has it, as kube-proxy leaves it (the differential
    // corpus showed kube-proxy never writes it; the CNI or the node's setup owns it).
    if ConnReuse::for_kernel(config.kernel_version) == ConnReuse::SetZero {
        s.insert("net/ipv4/vs/conn_reuse_mode".into(), "0".into());
    }
    if config.strict_arp {
        s.insert("net/ipv4/conf/all/arp_ignore".into(), "1".into());
        s.insert("net/ipv4/conf/all/arp_announce".into(), "2".into());
    }
    s
}
