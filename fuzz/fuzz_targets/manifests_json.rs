//! A `--manifests` JSON file from arbitrary bytes: JSON, Kubernetes objects, their
//! conversion and validation into the cluster snapshot.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/agent/tests/fuzz/decode.rs"]
mod decode;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    decode::manifests_json(data);
});
