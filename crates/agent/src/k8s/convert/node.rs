//! Nodes: their addresses, pod CIDRs and labels.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use super::parse::{missing, parse_cidr, parse_ip};
use super::{ConvertError, Kind, ObjectRef, Reason};
use crate::model::snapshot::cluster::Node;

/// Converts a Node: its `InternalIP` addresses first, then its `ExternalIP` ones (other
/// address types are left out, duplicates kept once), `spec.podCIDRs` falling back to
/// `spec.podCIDR`, and its labels.
pub fn node(node: &core::Node) -> Result<Node, ConvertError> {
    let object = ObjectRef::of(Kind::Node, &node.metadata);
    node_inner(node).map_err(|reason| ConvertError {
        object,
        reason: Box::new(reason),
    })
}

fn node_inner(node: &core::Node) -> Result<Node, Reason> {
    let name = node
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| missing("metadata.name"))?;

    let listed = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default();
    let mut addresses = Vec::new();
    for wanted in ["InternalIP", "ExternalIP"] {
        for (i, a) in listed.iter().enumerate() {
            if a.type_ != wanted {
                continue;
            }
            let ip = parse_ip(|| format!("status.addresses[{i}].address"), &a.address)?;
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
    }

    let spec = node.spec.as_ref();
    let pod_cidrs = match spec.and_then(|s| s.pod_cidrs.as_deref()) {
        Some(list) if !list.is_empty() => list
            .iter()
            .enumerate()
            .map(|(i, c)| parse_cidr(|| format!("spec.podCIDRs[{i}]"), c))
            .collect::<Result<Vec<_>, _>>()?,
        _ => match spec
            .and_then(|s| s.pod_cidr.as_deref())
            .filter(|c| !c.is_empty())
        {
            Some(c) => vec![parse_cidr(|| "spec.podCIDR".into(), c)?],
            None => Vec::new(),
        },
    };

    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    Ok(Node {
        name: name.to_owned(),
        addresses,
        pod_cidrs,
        labels,
    })
}
