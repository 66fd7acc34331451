//! The API-server source alone: how much memory it takes to hold a cluster's first complete
//! snapshot, without a kernel (the host needs no IPVS).
//!
//! ```sh
//! cargo run -p lab -- control-plane             # a real kube-apiserver on the host
//! # create the objects (tests/peers/tests/beside/mod.rs's S(N, 5) shape), then:
//! cargo run --release -p kube-proxy-ipvs-agent --example source_rss -- \
//!     target/lab/control-plane/admin-host.kubeconfig NODE [list|stream]
//! ```
//!
//! Prints the objects of the first snapshot, the time it took and the process's peak RSS
//! (`VmHWM`) then and after a few more seconds of watching.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_proxy_ipvs_agent::source::api::{self, ClientOptions, Watches};

fn status(key: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .map(|l| l[key.len()..].trim().to_string())
        .unwrap_or_default()
}

#[tokio::main(worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(kubeconfig), Some(node)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: source_rss KUBECONFIG NODE [list|stream]");
        std::process::exit(2);
    };
    let stream = args.get(3).is_some_and(|m| m == "stream");
    let options = ClientOptions {
        kubeconfig: Some(kubeconfig.into()),
        qps: 0.0,
        ..ClientOptions::default()
    };
    let client = api::client(&options).await.expect("a client");
    let watches = Watches::new(client, node.as_str()).streaming_lists(stream);
    let (tx, mut rx) = tokio::sync::watch::channel(None);
    let t = Instant::now();
    tokio::spawn(watches.run(tx));
    let snapshot = loop {
        rx.changed().await.expect("the source runs");
        if let Some(c) = rx.borrow_and_update().clone() {
            break c.cluster;
        }
    };
    println!(
        "first snapshot: {} services, {} slices in {:.2} s; VmHWM {} VmRSS {}",
        snapshot.services.len(),
        snapshot.slices.len(),
        t.elapsed().as_secs_f64(),
        status("VmHWM:"),
        status("VmRSS:")
    );
    let held: Arc<_> = snapshot;
    tokio::time::sleep(Duration::from_secs(5)).await;
    println!(
        "5 s later: VmHWM {} VmRSS {} (snapshot of {} services held)",
        status("VmHWM:"),
        status("VmRSS:"),
        held.services.len()
    );
}
