//! What the agent's fuzz targets (`ctnetlink`, `manifests_yaml`, `manifests_json`) do with
//! their bytes, shared with the regression test `fuzz_regressions` (both include this file
//! by path, so they cannot drift apart). The only property is that nothing panics: bad input
//! is an `Err`, a skipped entry or a rejected manifest.

use kube_proxy_ipvs_agent::dataplane::conntrack::{Reply, replies};
use kube_proxy_ipvs_agent::source::manifests::{Loaded, load_json_str, load_str};

/// What a ctnetlink datagram decoded to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ctnetlink {
    /// Entries decoded into flows.
    pub flows: usize,
    /// Entries that could not be (garbled or without ports).
    pub undecoded: usize,
    /// Acknowledgements, refusals and ends of dumps.
    pub control: usize,
    /// Messages of other netfilter subsystems, left undecoded.
    pub other: usize,
    /// Framing errors (each ends the datagram).
    pub errors: usize,
}

/// Decodes one datagram as a dump or a delete reads it from the kernel.
pub fn ctnetlink(data: &[u8]) -> Ctnetlink {
    let mut seen = Ctnetlink::default();
    for reply in replies(data) {
        match reply {
            Ok(Reply::Entry(Some(flow))) => {
                seen.flows += 1;
                let _ = flow.service_protocol();
            }
            Ok(Reply::Entry(None)) => seen.undecoded += 1,
            Ok(Reply::Done | Reply::Ack(_) | Reply::Error(_)) => seen.control += 1,
            Ok(Reply::Other(_)) => seen.other += 1,
            Err(e) => {
                seen.errors += 1;
                let _ = e.to_string();
            }
        }
    }
    seen
}

/// The node the manifests are read for (the demo's).
pub const NODE: &str = "node-a";

/// Reads `data` as a `--manifests` YAML file (bytes that are not UTF-8 are replaced, so
/// every input reaches the parser).
pub fn manifests_yaml(data: &[u8]) -> Loaded {
    checked(load_str("fuzz.yaml", &String::from_utf8_lossy(data), NODE))
}

/// Reads `data` as a `--manifests` JSON file.
pub fn manifests_json(data: &[u8]) -> Loaded {
    checked(load_json_str(
        "fuzz.json",
        &String::from_utf8_lossy(data),
        NODE,
    ))
}

/// A rejection always says where and why.
fn checked(loaded: Loaded) -> Loaded {
    for (object, reason) in &loaded.rejected {
        assert!(
            !object.is_empty() && !reason.to_string().is_empty(),
            "{loaded:?}"
        );
    }
    loaded
}
