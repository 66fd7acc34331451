//! The fuzz target `ipvs_message` without cargo-fuzz, for CI: the hostile inputs kept in
//! `tests/fuzz-regressions/ipvs_message` (every input the fuzzer crashed on, kept after the
//! fix, as `crash-*`; none so far; and hand-made length and nesting edge cases, `edge-*`)
//! and its seed corpus (`tests/fuzz-corpus/ipvs_message`: the golden vectors' genl
//! payloads, a few hand-made replies and `fuzz-*`, small inputs the fuzzer kept for their
//! coverage) go through the very decoding of the target, then fixed-seed mutations of the
//! seeds do. `tests/fuzz.sh` runs the real fuzzer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

#[path = "fuzz/decode.rs"]
mod decode;
// Its text mutations serve the agent's manifest targets only.
#[allow(dead_code)]
#[path = "fuzz/mutate.rs"]
mod mutate;

use decode::decode;
use mutate::{Rng, files, mutate};

fn dir(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(kind)
        .join("ipvs_message")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_seed_decodes_through_the_typed_layer() {
    let seeds = files(&dir("fuzz-corpus"));
    assert!(seeds.len() >= 10, "{} seeds", seeds.len());
    // The golden vectors and hand-made replies are valid; `fuzz-*`, picked by the fuzzer
    // for their coverage, need not be.
    for (name, bytes) in seeds.iter().filter(|(n, _)| !n.starts_with("fuzz-")) {
        let reached = decode(bytes);
        assert!(reached.message, "seed {name} does not decode");
    }
    // Every object kind is represented.
    let typed: usize = seeds.iter().map(|(_, b)| decode(b).typed).sum();
    assert!(typed >= 10, "only {typed} typed objects in the seeds");
}

#[test]
fn every_kept_hostile_input_is_an_error_or_a_value() {
    let crashes = files(&dir("fuzz-regressions"));
    assert!(!crashes.is_empty(), "the regression directory is empty");
    for (name, bytes) in &crashes {
        let outcome = catch_unwind(AssertUnwindSafe(|| decode(bytes)));
        assert!(outcome.is_ok(), "{name} ({}) panics", hex(bytes));
        // Each is malformed somewhere the wire layer looks (a service nest read as an info
        // reply's u32 version, too).
        assert!(!outcome.unwrap().message, "{name} decodes");
    }
}

/// 20000 mutations (well under a second in debug); a failure prints the case and its bytes (paste them into a file of
/// `tests/fuzz-regressions/ipvs_message` to keep it).
const CASES: usize = 20_000;

#[test]
fn mutated_seeds_decode_without_panicking() {
    // Mutations of the seeds, spliced with the seeds and the crashes.
    let seeds: Vec<Vec<u8>> = files(&dir("fuzz-corpus"))
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    let partners: Vec<Vec<u8>> = files(&dir("fuzz-regressions"))
        .into_iter()
        .map(|(_, b)| b)
        .chain(seeds.iter().cloned())
        .collect();
    let mut rng = Rng::new(0x1f05_2026);
    let (mut decoded, mut typed) = (0, 0);
    for case in 0..CASES {
        let seed = &seeds[case % seeds.len()];
        let input = mutate(&mut rng, seed, &partners);
        match catch_unwind(AssertUnwindSafe(|| decode(&input))) {
            Ok(reached) => {
                decoded += usize::from(reached.message);
                typed += reached.typed;
            }
            Err(_) => panic!("mutation case {case} panics: {}", hex(&input)),
        }
    }
    // The mutations stay close enough to real messages to reach the typed layer.
    assert!(
        decoded > CASES / 50,
        "only {decoded} mutated messages decoded"
    );
    assert!(
        typed > CASES / 50,
        "only {typed} typed objects from mutated messages"
    );
}
