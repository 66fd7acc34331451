//! EndpointSlices: their Service, address family, ports and endpoints with their
//! conditions and topology hints.

use std::time::SystemTime;

use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{dns_label, dns_subdomain, has_label, labels, namespace_of};
use super::parse::{missing, parse_ip, parse_port, parse_protocol};
use super::{ConvertError, FamilyName, Kind, ObjectRef, Reason};
use crate::model::snapshot::cluster::{
    Endpoint, EndpointHints, EndpointPort, EndpointSlice, Family, ServiceRef, intern,
};

/// Set on the Services and EndpointSlices of headless Services; kube-proxy leaves them out.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// Names the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The annotation the EndpointSlice controller sets to the time of the change it carries.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The most endpoints an EndpointSlice may hold (the API's validation limit).
pub const MAX_SLICE_ENDPOINTS: usize = 1000;
/// The most ports an EndpointSlice may list (the API's validation limit).
pub const MAX_SLICE_PORTS: usize = 100;

/// kube-proxy's EndpointSlice informer selects `!headless`.
fn slice_ignored_by_kube_proxy(meta: &ObjectMeta) -> bool {
    has_label(meta, HEADLESS_LABEL)
}

/// Converts an EndpointSlice.
///
/// `Ok(None)` for a slice kube-proxy does not watch (labelled [`HEADLESS_LABEL`]) and for an
/// `FQDN` slice. Condition defaults are kube-proxy's (`addEndpoints`): `ready` and `serving`
/// absent are true, `terminating` absent is false. (The API's field doc says an absent
/// `serving` defers to `ready`; kube-proxy reads it as true, and so a terminating endpoint
/// that says only `ready: false` stays a fallback, as kube-proxy keeps it.) A port
/// with no number is left out (it would mean "all ports", which kube-proxy does not
/// support); a port's name defaults to "" and its protocol to TCP. Each endpoint is its first
/// address, the one kube-proxy uses.
pub fn endpoint_slice(
    slice: &discovery::EndpointSlice,
) -> Result<Option<EndpointSlice>, ConvertError> {
    let object = ObjectRef::of(Kind::EndpointSlice, &slice.metadata);
    if slice_ignored_by_kube_proxy(&slice.metadata) {
        return Ok(None);
    }
    endpoint_slice_inner(slice).map_err(|reason| ConvertError {
        object,
        reason: Box::new(reason),
    })
}

fn endpoint_slice_inner(slice: &discovery::EndpointSlice) -> Result<Option<EndpointSlice>, Reason> {
    let meta = &slice.metadata;
    let (name, service_name) = slice_names(meta)?;
    let Some(family) = address_family(&slice.address_type)? else {
        return Ok(None);
    };
    within_limits(slice)?;
    let ports = slice_ports(slice.ports.iter().flatten())?;
    // Optional in the newer API types (k8s-openapi v1_37); absent is none, as for kube-proxy.
    let given = slice.endpoints.as_deref().unwrap_or_default();
    let mut endpoints = Vec::with_capacity(given.len());
    for (i, ep) in given.iter().enumerate() {
        endpoints.push(endpoint(i, ep, family)?);
    }
    Ok(Some(EndpointSlice {
        name: name.into(),
        service: ServiceRef::new(namespace_of(meta), service_name),
        family,
        ports,
        endpoints,
        trigger_time: trigger_time(meta),
    }))
}

/// The slice's own name and its Service's (from [`SERVICE_NAME_LABEL`]), after the API's
/// checks of its name, namespace and labels.
fn slice_names(meta: &ObjectMeta) -> Result<(&str, &str), Reason> {
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("metadata.name"))?;
    dns_subdomain("metadata.name", name)?;
    dns_label("metadata.namespace", namespace_of(meta))?;
    labels(meta)?;
    let service_name = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing(format!("metadata.labels[{SERVICE_NAME_LABEL}]")))?;
    Ok((name, service_name))
}

/// `addressType`; `None` for `FQDN`, which kube-proxy does not serve.
fn address_family(address_type: &str) -> Result<Option<Family>, Reason> {
    match address_type {
        "IPv4" => Ok(Some(Family::V4)),
        "IPv6" => Ok(Some(Family::V6)),
        "FQDN" => Ok(None),
        // k8s-openapi reads a missing addressType as "".
        "" => Err(missing("addressType")),
        other => Err(Reason::UnknownValue {
            field: "addressType".into(),
            value: other.to_owned(),
            expected: "IPv4, IPv6 or FQDN",
        }),
    }
}

/// Checks the API's limits on the numbers of ports and endpoints.
fn within_limits(slice: &discovery::EndpointSlice) -> Result<(), Reason> {
    let port_count = slice.ports.as_ref().map_or(0, Vec::len);
    if port_count > MAX_SLICE_PORTS {
        return Err(Reason::TooMany {
            field: "ports".into(),
            count: port_count,
            max: MAX_SLICE_PORTS,
        });
    }
    let endpoints = slice.endpoints.as_deref().unwrap_or_default();
    if endpoints.len() > MAX_SLICE_ENDPOINTS {
        return Err(Reason::TooMany {
            field: "endpoints".into(),
            count: endpoints.len(),
            max: MAX_SLICE_ENDPOINTS,
        });
    }
    Ok(())
}

/// The ports with a number, each name once.
fn slice_ports<'a>(
    listed: impl Iterator<Item = &'a discovery::EndpointPort>,
) -> Result<Vec<EndpointPort>, Reason> {
    // Each port with its index in `ports`, for the message naming an earlier duplicate.
    let mut ports: Vec<(usize, EndpointPort)> = Vec::new();
    for (i, p) in listed.enumerate() {
        let Some(number) = p.port else {
            continue;
        };
        let port = parse_port(|| format!("ports[{i}].port"), number)?;
        let protocol = parse_protocol(|| format!("ports[{i}].protocol"), p.protocol.as_deref())?;
        let name = p.name.clone().unwrap_or_default();
        if let Some((j, _)) = ports.iter().find(|(_, q)| q.name == name) {
            return Err(Reason::DuplicatePortName {
                field: format!("ports[{i}].name"),
                name,
                first: format!("ports[{j}].name"),
            });
        }
        ports.push((
            i,
            EndpointPort {
                name,
                protocol,
                port,
            },
        ));
    }
    Ok(ports.into_iter().map(|(_, p)| p).collect())
}

/// Endpoint `i`: its first address, which must be of the slice's `family`, its conditions
/// with the API's defaults, its node, zone and hints.
fn endpoint(i: usize, ep: &discovery::Endpoint, family: Family) -> Result<Endpoint, Reason> {
    let address = ep
        .addresses
        .first()
        .ok_or_else(|| missing(format!("endpoints[{i}].addresses")))?;
    let field = || format!("endpoints[{i}].addresses[0]");
    let address = parse_ip(field, address)?;
    if Family::of(&address) != family {
        return Err(Reason::FamilyMismatch {
            field: field(),
            value: address,
            expected: FamilyName(family),
        });
    }
    let conditions = ep.conditions.as_ref();
    let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
    let serving = conditions.and_then(|c| c.serving).unwrap_or(true);
    let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
    Ok(Endpoint {
        address,
        ready,
        serving,
        terminating,
        node_name: ep
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(intern),
        zone: ep.zone.as_deref().filter(|z| !z.is_empty()).map(intern),
        hints: hints(ep.hints.as_ref()),
    })
}

/// The endpoint's topology hints; `None` when they name no zone and no node.
fn hints(hints: Option<&discovery::EndpointHints>) -> Option<Box<EndpointHints>> {
    hints
        .map(|h| EndpointHints {
            zones: h
                .for_zones
                .iter()
                .flatten()
                .map(|z| z.name.clone())
                .collect(),
            nodes: h
                .for_nodes
                .iter()
                .flatten()
                .map(|n| n.name.clone())
                .collect(),
        })
        .filter(|h| !h.zones.is_empty() || !h.nodes.is_empty())
        .map(Box::new)
}

/// The slice's `endpoints.kubernetes.io/last-change-trigger-time` (RFC 3339). A malformed
/// one is ignored, as kube-proxy ignores it: it only feeds a metric.
fn trigger_time(meta: &ObjectMeta) -> Option<SystemTime> {
    let text = meta.annotations.as_ref()?.get(TRIGGER_TIME_ANNOTATION)?;
    text.trim()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}
