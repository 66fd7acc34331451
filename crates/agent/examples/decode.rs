//! What the initial read's decoding costs, JSON against protobuf, on the real API server's
//! bytes (the agent reads JSON; kube-proxy's client asks for protobuf).
//!
//! `bench/decode.sh` starts the lab's real kube-apiserver on the host, creates S(N, 5) (the
//! benches' shape), saves the Service and EndpointSlice lists in both encodings, and runs:
//!
//! ```sh
//! cargo run --release -p kube-proxy-ipvs-agent --example decode -- DIR [REPS]
//! ```
//!
//! `DIR` holds `services.json`, `services.pb`, `slices.json` and `slices.pb`. Per kind it
//! prints the median over `REPS` (5) of: the JSON decode into k8s-openapi's types (what
//! kube does with a list or a watch event), the protobuf decode into k8s-pb's (the envelope
//! and the list), and the agent's conversion of the decoded objects into its model; then
//! the ratio protobuf / JSON of the decode. The protobuf objects are decoded only, not
//! converted: the agent has no conversion from k8s-pb's types.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::List;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use kube_proxy_ipvs_agent::k8s::convert;
use prost::Message;

/// The 4 bytes before a protobuf-encoded object (`k8s\0`).
const MAGIC: &[u8] = b"k8s\0";

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| {
        eprintln!("decode: {}: {e}", dir.join(name).display());
        std::process::exit(2)
    })
}

/// The median of `reps` runs of `f`, and what the last run returned.
fn median<T>(reps: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(reps);
    let mut out = None;
    for _ in 0..reps {
        let t = Instant::now();
        let v = std::hint::black_box(f());
        times.push(t.elapsed());
        out = Some(v);
    }
    times.sort();
    (times[reps / 2], out.expect("at least one repetition"))
}

/// The object list inside the API server's protobuf envelope.
fn unwrap_envelope(bytes: &[u8]) -> Unknown {
    let body = bytes.strip_prefix(MAGIC).unwrap_or_else(|| {
        eprintln!("decode: a protobuf body starts with k8s\\0");
        std::process::exit(2)
    });
    Unknown::decode(body).unwrap_or_else(|e| {
        eprintln!("decode: the protobuf envelope: {e}");
        std::process::exit(2)
    })
}

struct Row {
    kind: &'static str,
    objects: usize,
    /// How many the agent's conversion took in (the others it leaves out or rejects).
    converted: usize,
    json_bytes: usize,
    pb_bytes: usize,
    json: Duration,
    pb: Duration,
    convert: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One kind's row: `STEM.json` decoded into `K`'s list, `STEM.pb` into `P` (whose items
/// `count` counts), and the decoded objects through the agent's conversion `converts`.
fn measure<K, P>(
    dir: &Path,
    (kind, stem): (&'static str, &str),
    reps: usize,
    count: fn(&P) -> usize,
    converts: fn(&K) -> bool,
) -> Row
where
    K: k8s_openapi::ListableResource + serde::de::DeserializeOwned,
    P: Message + Default,
{
    let json = read(dir, &format!("{stem}.json"));
    let pb = read(dir, &format!("{stem}.pb"));
    let (t_json, list) = median(reps, || {
        serde_json::from_slice::<List<K>>(&json)
            .unwrap_or_else(|e| panic!("{stem}.json: a {kind} list: {e}"))
    });
    let (t_pb, n_pb) = median(reps, || {
        let raw = unwrap_envelope(&pb).raw.unwrap_or_default();
        count(
            &P::decode(raw.as_slice()).unwrap_or_else(|e| panic!("{stem}.pb: a {kind} list: {e}")),
        )
    });
    let (t_conv, converted) = median(reps, || list.items.iter().filter(|o| converts(o)).count());
    assert_eq!(n_pb, list.items.len(), "both encodings hold the same list");
    Row {
        kind,
        objects: list.items.len(),
        converted,
        json_bytes: json.len(),
        pb_bytes: pb.len(),
        json: t_json,
        pb: t_pb,
        convert: t_conv,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1).map(Path::new) else {
        eprintln!("usage: decode DIR [REPS]");
        std::process::exit(2);
    };
    let reps: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(5).max(1);

    let rows = [
        measure::<Service, k8s_pb::api::core::v1::ServiceList>(
            dir,
            ("Service", "services"),
            reps,
            |l| l.items.len(),
            |s| convert::service(s).is_ok_and(|s| s.is_some()),
        ),
        measure::<EndpointSlice, k8s_pb::api::discovery::v1::EndpointSliceList>(
            dir,
            ("EndpointSlice", "slices"),
            reps,
            |l| l.items.len(),
            |s| convert::endpoint_slice(s).is_ok_and(|s| s.is_some()),
        ),
    ];

    println!(
        "| kind | objects (converted) | JSON bytes | protobuf bytes | JSON decode ms | protobuf decode ms | protobuf / JSON | conversion ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let (mut json_all, mut pb_all, mut conv_all) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for r in &rows {
        println!(
            "| {} | {} ({}) | {} | {} | {:.1} | {:.1} | {:.3} | {:.1} |",
            r.kind,
            r.objects,
            r.converted,
            r.json_bytes,
            r.pb_bytes,
            ms(r.json),
            ms(r.pb),
            r.pb.as_secs_f64() / r.json.as_secs_f64(),
            ms(r.convert)
        );
        json_all += r.json;
        pb_all += r.pb;
        conv_all += r.convert;
    }
    println!(
        "decode: both kinds, median of {reps}: JSON {:.1} ms, protobuf {:.1} ms (ratio {:.3}), the agent's conversion {:.1} ms",
        ms(json_all),
        ms(pb_all),
        pb_all.as_secs_f64() / json_all.as_secs_f64(),
        ms(conv_all)
    );
}
