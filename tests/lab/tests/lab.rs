//! Kernel tests of the lab itself, run inside the VM (`cargo run -p lab -- test -p lab`).

use std::net::SocketAddr;

use lab::guest::{NamedNetns, Netns, kernel_release, sh};
use lab::net::{Pod, ask_tcp, bridge, client, within};

/// The VM runs Debian's cloud kernel, not the host's, and it has IPVS.
#[test]
fn guest_runs_the_debian_kernel_with_ipvs() {
    let _ns = Netns::fresh();
    let release = kernel_release();
    assert!(
        release.ends_with("-cloud-amd64"),
        "unexpected kernel {release}"
    );
    let version = sh("cat /proc/net/ip_vs");
    assert!(
        version.starts_with("IP Virtual Server version"),
        "no IPVS: {version}"
    );
    println!("guest kernel {release}");
}

/// Each test's namespace is its own: a service made here is not seen by another namespace.
#[test]
fn each_test_has_its_own_network_namespace() {
    let _ns = Netns::fresh();
    sh("ipvsadm -A -t 10.9.9.9:80 -s rr");
    let other = NamedNetns::new("isolation");
    let seen = other.sh("ipvsadm -Sn");
    assert_eq!(seen, "", "another namespace sees our service");
    assert!(sh("ipvsadm -Sn").contains("10.9.9.9:80"));
}

/// The data path: two pods behind an rr IPVS service on a VIP held by the dummy `kube-ipvs0`;
/// requests from a client namespace alternate between them. Proves the lab carries traffic.
#[test]
fn rr_service_alternates_between_two_pods() {
    let _ns = Netns::fresh();
    bridge("10.244.0.1");
    let _pods = [
        Pod::start("pod1", "10.244.0.2", "10.244.0.1", &[8080]),
        Pod::start("pod2", "10.244.0.3", "10.244.0.1", &[8080]),
    ];
    let client = client("client", "192.168.100.1", "192.168.100.2");

    // kube-proxy's shape: the VIP on a dummy link left down, masquerade real servers, weight 1.
    sh("ip link add kube-ipvs0 type dummy && ip addr add 10.96.0.10/32 dev kube-ipvs0");
    sh("ipvsadm -A -t 10.96.0.10:80 -s rr");
    sh("ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1");
    sh("ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.3:8080 -m -w 1");

    let vip: SocketAddr = "10.96.0.10:80".parse().unwrap();
    let answers: Vec<String> = (0..6)
        .map(|i| {
            within(&client, move || ask_tcp(vip)).unwrap_or_else(|e| panic!("request {i}: {e}"))
        })
        .collect();
    let first = answers[0].clone();
    assert!(
        ["pod1", "pod2"].contains(&first.as_str()),
        "unexpected answer {first}"
    );
    let second = if first == "pod1" { "pod2" } else { "pod1" };
    for (i, a) in answers.iter().enumerate() {
        let want = if i % 2 == 0 { first.as_str() } else { second };
        assert_eq!(
            a, want,
            "request {i} of {answers:?}: rr must alternate strictly"
        );
    }
    // IPVS counted the connections on both real servers.
    let stats = sh("ipvsadm -Ln --stats");
    assert!(
        stats.contains("10.244.0.2:8080") && stats.contains("10.244.0.3:8080"),
        "{stats}"
    );
    println!("answers: {answers:?}");
}
