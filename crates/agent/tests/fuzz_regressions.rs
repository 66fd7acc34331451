//! The agent's fuzz targets without cargo-fuzz, for CI: for `ctnetlink`, `manifests_yaml`
//! and `manifests_json`, every input the target ever crashed on
//! (`tests/fuzz-regressions/<target>`, kept after the fix) and its seed corpus
//! (`tests/fuzz-corpus/<target>`: hand-made kernel datagrams, the demo's manifests, and
//! `fuzz-*`, small datagrams the fuzzer kept for their coverage) go through the very
//! decoding of the target, then fixed-seed mutations of the seeds do. `tests/fuzz.sh` runs
//! the real fuzzer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use kube_proxy_ipvs_agent::k8s::convert::Reason;
use kube_proxy_ipvs_agent::source::Rejection;

#[path = "fuzz/decode.rs"]
mod decode;
// The mutator is the IPVS library's, shared by path.
#[path = "../../ipvs-netlink/tests/fuzz/mutate.rs"]
mod mutate;

use mutate::{Rng, files, mutate, mutate_text};

const TARGETS: [&str; 3] = ["ctnetlink", "manifests_yaml", "manifests_json"];

fn dir(kind: &str, target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(kind)
        .join(target)
}

/// The inputs `target` once crashed on: none when the fuzzer never crashed it (git keeps no
/// empty directory, so a target without crashes has none).
fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = dir("fuzz-regressions", target);
    if dir.exists() {
        files(&dir)
    } else {
        Vec::new()
    }
}

/// Runs `target`'s decoding; a number that tells how far it got.
fn run(target: &str, data: &[u8]) -> usize {
    match target {
        "ctnetlink" => decode::ctnetlink(data).flows,
        "manifests_yaml" => decode::manifests_yaml(data).cluster.services.len(),
        "manifests_json" => decode::manifests_json(data).cluster.services.len(),
        other => panic!("unknown target {other}"),
    }
}

/// Text as a Rust string literal, datagrams in hex.
fn printable(target: &str, bytes: &[u8]) -> String {
    if target == "ctnetlink" {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    } else {
        format!("{:?}", String::from_utf8_lossy(bytes))
    }
}

#[test]
fn the_seeds_decode_into_flows_and_services() {
    let flows: Vec<_> = files(&dir("fuzz-corpus", "ctnetlink"))
        .iter()
        .map(|(name, b)| (name.clone(), decode::ctnetlink(b)))
        .collect();
    let by_name = |n: &str| flows.iter().find(|(name, _)| name == n).unwrap().1;
    let dump = by_name("dump-udp-tcp-icmp-done");
    // UDP and TCP entries are flows, ICMP has no ports, then the end of the dump.
    assert_eq!((dump.flows, dump.undecoded, dump.control), (2, 1, 1));
    assert_eq!(by_name("dump-v6-done").flows, 1);
    assert_eq!(by_name("acks-and-enoent").control, 3);
    // The hand-made datagrams are well framed (`fuzz-*`, picked by the fuzzer for their
    // coverage, need not be).
    let framed = flows.iter().filter(|(n, _)| !n.starts_with("fuzz-"));
    assert!(framed.clone().all(|(_, f)| f.errors == 0), "{flows:?}");
    assert_eq!(framed.count(), 4);

    let yaml = files(&dir("fuzz-corpus", "manifests_yaml"));
    let services: usize = yaml.iter().map(|(_, b)| run("manifests_yaml", b)).sum();
    assert!(services >= 4, "{services} services from the YAML seeds");
    let json = files(&dir("fuzz-corpus", "manifests_json"));
    let by_name = |n: &str| &json.iter().find(|(name, _)| name == n).unwrap().1;
    assert_eq!(run("manifests_json", by_name("web-service.json")), 1);
    assert!(run("manifests_json", by_name("list.json")) >= 3);
    let broken = decode::manifests_json(by_name("broken-service.json"));
    assert!(broken.cluster.services.is_empty());
    assert!(
        matches!(
            &broken.rejected[0].1,
            Rejection::Invalid(Reason::BadPort { field, value: 0 }) if field == "spec.ports[0].port"
        ),
        "{broken:?}"
    );
}

#[test]
fn every_input_that_crashed_a_fuzzer_is_now_an_error_or_a_value() {
    let mut total = 0;
    for target in TARGETS {
        for (name, bytes) in regressions(target) {
            total += 1;
            let outcome = catch_unwind(AssertUnwindSafe(|| run(target, &bytes)));
            assert!(outcome.is_ok(), "{target}/{name} panics");
        }
    }
    assert!(total > 0, "the regression directories are empty");
}

/// Fixed-seed mutations per target; a failure prints the case and its input (keep it as
/// a file of `tests/fuzz-regressions/<target>`).
#[test]
fn mutated_seeds_decode_without_panicking() {
    for (target, cases) in [
        ("ctnetlink", 10_000),
        ("manifests_yaml", 2000),
        ("manifests_json", 1000),
    ] {
        // Mutations of the seeds, spliced with the seeds and the crashes.
        let seeds: Vec<Vec<u8>> = files(&dir("fuzz-corpus", target))
            .into_iter()
            .map(|(_, b)| b)
            .collect();
        let partners: Vec<Vec<u8>> = regressions(target)
            .into_iter()
            .map(|(_, b)| b)
            .chain(seeds.iter().cloned())
            .collect();
        let mut rng = Rng::new(0x1f05_2026);
        let mut reached = 0;
        for case in 0..cases {
            let seed = &seeds[case % seeds.len()];
            let input = if target == "ctnetlink" {
                mutate(&mut rng, seed, &partners)
            } else {
                mutate_text(&mut rng, seed, &partners)
            };
            match catch_unwind(AssertUnwindSafe(|| run(target, &input))) {
                Ok(n) => reached += n,
                Err(_) => panic!(
                    "{target} mutation case {case} panics: {}",
                    printable(target, &input)
                ),
            }
        }
        // The mutations stay close enough to real input to reach the conversions.
        eprintln!("{target}: {cases} cases, {reached} flows or services");
        assert!(
            reached > cases / 50,
            "{target}: only {reached} flows or services"
        );
    }
}
