//! What the API objects imply any IPVS-mode proxy programmed: the oracle under the diff. Two
//! programs that wrote the same wrong state (both empty, both stale) compare equal; each side
//! is also checked against the objects the API server holds at the point compared.
//!
//! Only what holds in every configuration is implied, so that the check never needs to be
//! taught an exception: for each Service a proxy serves (not ExternalName, not headless, no
//! `service-proxy-name` label) and each of its ClusterIPs of a family the node serves, one
//! virtual server per port and its `KUBE-CLUSTER-IP` member; and when every endpoint serves
//! every node (internal traffic policy Cluster, no topology hints or traffic distribution),
//! one real server per ready endpoint address of the ClusterIP's family.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::Value;

use crate::state::Sections;

/// A line one section must hold: exactly, or as the start of a line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Implied {
    /// The section ([`crate::state::READERS`]).
    pub section: &'static str,
    /// The line, or its start.
    pub line: String,
    /// Whether `line` is the start of the line (a virtual server's scheduler and flags,
    /// a real server's forwarding method and weight are not implied).
    pub prefix: bool,
    /// The object that implies it, `namespace/name`.
    pub from: String,
}

/// The IPVS protocol flag of `ipvsadm -Sn` for a Kubernetes protocol.
fn ipvs_protocol(protocol: &str) -> Option<&'static str> {
    match protocol {
        "TCP" => Some("-t"),
        "UDP" => Some("-u"),
        "SCTP" => Some("--sctp-service"),
        _ => None,
    }
}

/// `ipvsadm`'s `address:port` (IPv6 in brackets).
fn endpoint(ip: IpAddr, port: i64) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn label<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.get("metadata")?.get("labels")?.get(key)?.as_str()
}

fn name(o: &Value) -> String {
    format!(
        "{}/{}",
        text(o, &["metadata", "namespace"]).unwrap_or_default(),
        text(o, &["metadata", "name"]).unwrap_or_default()
    )
}

/// What `services` and `slices` (the API objects, as JSON) imply on a node serving the IP
/// families whose `v6` flag is in `families` (`false`: IPv4).
pub fn implied(services: &[Value], slices: &[Value], families: &BTreeSet<bool>) -> Vec<Implied> {
    let mut out = Vec::new();
    for svc in services {
        let spec = &svc["spec"];
        if text(spec, &["type"]) == Some("ExternalName")
            || label(svc, "service.kubernetes.io/service-proxy-name").is_some()
            || label(svc, "service.kubernetes.io/headless").is_some()
        {
            continue;
        }
        let ips: Vec<IpAddr> = match spec["clusterIPs"].as_array() {
            Some(a) => a.iter().filter_map(|v| v.as_str()?.parse().ok()).collect(),
            None => text(spec, &["clusterIP"])
                .and_then(|s| s.parse().ok())
                .into_iter()
                .collect(),
        };
        let ns = text(svc, &["metadata", "namespace"]).unwrap_or_default();
        let svc_name = text(svc, &["metadata", "name"]).unwrap_or_default();
        let own_slices: Vec<&Value> = slices
            .iter()
            .filter(|s| {
                text(s, &["metadata", "namespace"]) == Some(ns)
                    && label(s, "kubernetes.io/service-name") == Some(svc_name)
            })
            .collect();
        let everywhere = text(spec, &["internalTrafficPolicy"]) != Some("Local")
            && spec.get("trafficDistribution").is_none_or(Value::is_null)
            && !own_slices.iter().any(|s| {
                s["endpoints"].as_array().is_some_and(|e| {
                    e.iter()
                        .any(|e| e.get("hints").is_some_and(|h| !h.is_null()))
                })
            });
        for port in spec["ports"].as_array().into_iter().flatten() {
            let protocol = text(port, &["protocol"]).unwrap_or("TCP");
            let (Some(flag), Some(number)) = (ipvs_protocol(protocol), port["port"].as_i64())
            else {
                continue;
            };
            let port_name = text(port, &["name"]).unwrap_or_default();
            for ip in ips.iter().filter(|ip| families.contains(&ip.is_ipv6())) {
                let vs = format!("{flag} {}", endpoint(*ip, number));
                out.push(Implied {
                    section: "ipvs",
                    line: format!("-A {vs} "),
                    prefix: true,
                    from: name(svc),
                });
                let set = if ip.is_ipv6() {
                    "KUBE-6-CLUSTER-IP"
                } else {
                    "KUBE-CLUSTER-IP"
                };
                out.push(Implied {
                    section: "ipset",
                    line: format!("add {set} {ip},{}:{number}", protocol.to_lowercase()),
                    prefix: false,
                    from: name(svc),
                });
                if !everywhere {
                    continue;
                }
                let family = if ip.is_ipv6() { "IPv6" } else { "IPv4" };
                for slice in own_slices
                    .iter()
                    .filter(|s| text(s, &["addressType"]) == Some(family))
                {
                    let Some(target) =
                        slice["ports"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find_map(|p| {
                                (text(p, &["name"]).unwrap_or_default() == port_name
                                    && text(p, &["protocol"]).unwrap_or("TCP") == protocol)
                                    .then(|| p["port"].as_i64())
                                    .flatten()
                            })
                    else {
                        continue;
                    };
                    for e in slice["endpoints"].as_array().into_iter().flatten() {
                        if e["conditions"]["ready"] == Value::Bool(false) {
                            continue;
                        }
                        for a in e["addresses"].as_array().into_iter().flatten() {
                            let Some(a) = a.as_str().and_then(|a| a.parse::<IpAddr>().ok()) else {
                                continue;
                            };
                            out.push(Implied {
                                section: "ipvs",
                                line: format!("-a {vs} -r {} ", endpoint(a, target)),
                                prefix: true,
                                from: name(slice),
                            });
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The implied lines `state` lacks, one message each.
pub fn missing(state: &Sections, implied: &[Implied]) -> Vec<String> {
    implied
        .iter()
        .filter(|i| {
            let lines = state.get(i.section).map(Vec::as_slice).unwrap_or_default();
            !lines.iter().any(|l| {
                if i.prefix {
                    l.starts_with(&i.line)
                } else {
                    *l == i.line
                }
            })
        })
        .map(|i| {
            format!(
                "{}: no {:?} (from {})",
                i.section,
                i.line.trim_end(),
                i.from
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn web() -> (Value, Value) {
        let svc = json!({
            "metadata": {"namespace": "peers", "name": "web"},
            "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00:96::20"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        });
        let slice = json!({
            "metadata": {"namespace": "peers", "name": "web-1",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["10.244.1.2"], "conditions": {"ready": true}},
                          {"addresses": ["10.244.1.3"], "conditions": {"ready": false}}]
        });
        (svc, slice)
    }

    fn state(ipvs: &[&str], ipset: &[&str]) -> Sections {
        let mut s = Sections::new();
        s.insert("ipvs", ipvs.iter().map(|l| l.to_string()).collect());
        s.insert("ipset", ipset.iter().map(|l| l.to_string()).collect());
        s
    }

    #[test]
    fn a_service_implies_its_virtual_servers_set_members_and_ready_real_servers() {
        let (svc, slice) = web();
        let v4 = BTreeSet::from([false]);
        let i = implied(&[svc], &[slice], &v4);
        let good = state(
            &[
                "-A -t 10.96.0.20:80 -s rr",
                "-a -t 10.96.0.20:80 -r 10.244.1.2:8080 -m -w 1",
            ],
            &["add KUBE-CLUSTER-IP 10.96.0.20,tcp:80"],
        );
        assert_eq!(missing(&good, &i), Vec::<String>::new());
        // An empty state, and one without the real server, fail.
        assert_eq!(missing(&state(&[], &[]), &i).len(), 3);
        let no_real = state(
            &["-A -t 10.96.0.20:80 -s rr"],
            &["add KUBE-CLUSTER-IP 10.96.0.20,tcp:80"],
        );
        assert_eq!(
            missing(&no_real, &i),
            ["ipvs: no \"-a -t 10.96.0.20:80 -r 10.244.1.2:8080\" (from peers/web-1)"]
        );
    }

    #[test]
    fn the_other_family_and_services_no_proxy_serves_imply_nothing() {
        let (svc, slice) = web();
        let both = BTreeSet::from([false, true]);
        let i = implied(
            std::slice::from_ref(&svc),
            std::slice::from_ref(&slice),
            &both,
        );
        assert!(i.iter().any(|i| i.line == "-A -t [fd00:96::20]:80 "));
        assert!(
            i.iter()
                .any(|i| i.line == "add KUBE-6-CLUSTER-IP fd00:96::20,tcp:80")
        );
        for skip in [
            json!({"metadata": {"labels": {"service.kubernetes.io/service-proxy-name": "x"}}}),
            json!({"metadata": {"labels": {"service.kubernetes.io/headless": ""}}}),
            json!({"spec": {"type": "ExternalName"}}),
        ] {
            let mut s = svc.clone();
            merge(&mut s, &skip);
            assert!(
                implied(&[s], std::slice::from_ref(&slice), &both).is_empty(),
                "{skip}"
            );
        }
    }

    #[test]
    fn endpoints_not_serving_every_node_imply_no_real_server() {
        let (svc, slice) = web();
        let v4 = BTreeSet::from([false]);
        for change in [
            json!({"spec": {"internalTrafficPolicy": "Local"}}),
            json!({"spec": {"trafficDistribution": "PreferClose"}}),
        ] {
            let mut s = svc.clone();
            merge(&mut s, &change);
            let i = implied(&[s], std::slice::from_ref(&slice), &v4);
            assert_eq!(i.len(), 2, "{change}: {i:?}");
        }
        let mut hinted = slice.clone();
        hinted["endpoints"][0]["hints"] = json!({"forZones": [{"name": "a"}]});
        assert_eq!(implied(&[svc], &[hinted], &v4).len(), 2);
    }

    fn merge(into: &mut Value, from: &Value) {
        match (into, from) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b.clone(),
        }
    }
}
