//! The per-virtual-server IPVS counters (`kube_proxy_ipvs_service_*`): what the kernel counted
//! for each of the agent's virtual servers, labelled with the Service port it serves.
//!
//! The kernel keeps the counts; the agent only shows the last ones a full sync listed (the
//! service dump carries them), so they are constant metrics of a snapshot, replaced whole at
//! each full sync, rather than counters the agent increments.

use std::sync::Mutex;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

use crate::dataplane::Traffic;
use crate::sync::ServiceTraffic;

/// `{namespace, service, port_name, protocol, address}`: the Service port a virtual server
/// serves, and the virtual server's own address and port (unique per series: one Service
/// port has a virtual server per ClusterIP, external IP, load-balancer IP and node address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Labels {
    namespace: String,
    service: String,
    port_name: String,
    protocol: &'static str,
    address: String,
}

/// One counter family: its name without `_total` (the encoder adds it), its help, and which
/// count it shows.
type Counted = (&'static str, &'static str, fn(&Traffic) -> u64);

/// The five counters.
const COUNTERS: [Counted; 5] = [
    (
        "kube_proxy_ipvs_service_connections",
        "Connections IPVS scheduled to the virtual server since it was made, by Service port and virtual server (read at each full sync)",
        |t| t.connections,
    ),
    (
        "kube_proxy_ipvs_service_in_packets",
        "Packets the virtual server received from clients, by Service port and virtual server (read at each full sync)",
        |t| t.in_packets,
    ),
    (
        "kube_proxy_ipvs_service_out_packets",
        "Packets the virtual server sent back to clients, by Service port and virtual server (read at each full sync)",
        |t| t.out_packets,
    ),
    (
        "kube_proxy_ipvs_service_in_bytes",
        "Bytes the virtual server received from clients, by Service port and virtual server (read at each full sync)",
        |t| t.in_bytes,
    ),
    (
        "kube_proxy_ipvs_service_out_bytes",
        "Bytes the virtual server sent back to clients, by Service port and virtual server (read at each full sync)",
        |t| t.out_bytes,
    ),
];

/// The last snapshot, encoded at each scrape.
#[derive(Debug, Default)]
pub(super) struct Collector {
    servers: Mutex<Vec<ServiceTraffic>>,
}

impl Collector {
    /// Replaces the snapshot.
    pub(super) fn replace(&self, servers: Vec<ServiceTraffic>) {
        *self.servers.lock().unwrap_or_else(|e| e.into_inner()) = servers;
    }
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        // Each server's labels once, for the five families.
        let labelled: Vec<(Labels, &Traffic)> = servers
            .iter()
            .map(|s| {
                let labels = Labels {
                    namespace: s.service.namespace.to_string(),
                    service: s.service.name.to_string(),
                    port_name: s.port_name.clone(),
                    protocol: protocol_label(s.key.protocol),
                    address: std::net::SocketAddr::new(s.key.address, s.key.port).to_string(),
                };
                (labels, &s.traffic)
            })
            .collect();
        for (name, help, value) in COUNTERS {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (labels, traffic) in &labelled {
                ConstCounter::new(value(traffic)).encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// The protocol as a Service's port spells it.
fn protocol_label(p: crate::model::snapshot::cluster::Protocol) -> &'static str {
    use crate::model::snapshot::cluster::Protocol;
    match p {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}
