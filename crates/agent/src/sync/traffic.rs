//! What IPVS counted for the agent's virtual servers, by the Service port each serves
//! (`kube_proxy_ipvs_service_*`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dataplane::Traffic;
use crate::model::kernel::VsKey;
use crate::model::snapshot::cluster::{Service, ServicePort, ServiceRef};

/// What IPVS counted for one of the agent's virtual servers, with the Service port it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceTraffic {
    /// The Service.
    pub service: ServiceRef,
    /// The name of its port (empty for a single unnamed port).
    pub port_name: String,
    /// The virtual server.
    pub key: VsKey,
    /// The counts.
    pub traffic: Traffic,
}

/// The counts of the virtual servers `owners` gives a Service to; foreign ones are left out.
pub(super) fn service_traffic(
    counted: &BTreeMap<VsKey, Traffic>,
    owners: &BTreeMap<VsKey, Arc<Service>>,
) -> Vec<ServiceTraffic> {
    counted
        .iter()
        .filter_map(|(key, traffic)| {
            let svc = owners.get(key)?;
            Some(ServiceTraffic {
                service: svc.id.clone(),
                port_name: port_name(svc, key).to_string(),
                key: *key,
                traffic: *traffic,
            })
        })
        .collect()
}

/// The name of the port of `svc` that virtual server `key` serves: its service port on one of
/// the Service's own addresses, else its node port (on a node address).
fn port_name<'a>(svc: &'a Service, key: &VsKey) -> &'a str {
    let own = svc
        .cluster_ips
        .iter()
        .chain(&svc.external_ips)
        .chain(&svc.load_balancer_ips)
        .any(|a| *a == key.address);
    let same = |p: &&ServicePort| p.protocol == key.protocol;
    let found = if own {
        svc.ports.iter().filter(same).find(|p| p.port == key.port)
    } else {
        svc.ports
            .iter()
            .filter(same)
            .find(|p| p.node_port == Some(key.port))
    };
    found.map_or("", |p| p.name.as_str())
}
