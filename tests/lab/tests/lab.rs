//! Kernel tests of the lab itself, run inside the VM (`cargo run -p lab -- test -p lab`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use lab::guest::{NamedNetns, Netns, kernel_release, sh};

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

/// A pod: a namespace on the `cni0` bridge whose server answers each connection with its name.
struct Pod {
    _ns: NamedNetns,
}

fn pod(name: &str, ip: &str, index: u32) -> Pod {
    let ns = NamedNetns::new(name);
    let host_end = format!("veth{index}");
    sh(&format!(
        "ip link add {host_end} type veth peer name eth0 netns {n} && \
         ip link set {host_end} master cni0 up && \
         ip -n {n} addr add {ip}/24 dev eth0 && ip -n {n} link set eth0 up && \
         ip -n {n} route add default via 10.244.0.1",
        n = ns.name()
    ));
    let listener = {
        let (tx, rx) = std::sync::mpsc::channel();
        let reply = format!("{name}\n");
        ns.spawn(move || {
            let listener =
                TcpListener::bind((Ipv4Addr::UNSPECIFIED, 8080)).expect("bind 8080 in the pod");
            tx.send(()).unwrap();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        rx
    };
    listener
        .recv_timeout(Duration::from_secs(10))
        .expect("pod server started");
    Pod { _ns: ns }
}

/// Asks `vip:port` once from the client namespace and returns the answering pod's name.
fn ask(client: &NamedNetns, vip: Ipv4Addr, port: u16) -> String {
    client
        .spawn(move || {
            let mut s =
                TcpStream::connect_timeout(&SocketAddr::from((vip, port)), Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connect {vip}:{port}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            answer.trim().to_string()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The data path: two pods behind an rr IPVS service on a VIP held by the dummy `kube-ipvs0`;
/// requests from a client namespace alternate between them. Proves the lab carries traffic.
#[test]
fn rr_service_alternates_between_two_pods() {
    let _ns = Netns::fresh();
    sh("sysctl -qw net.ipv4.ip_forward=1");
    sh("ip link add cni0 type bridge && ip addr add 10.244.0.1/24 dev cni0 && ip link set cni0 up");
    let pods = [pod("pod1", "10.244.0.2", 1), pod("pod2", "10.244.0.3", 2)];

    let client = NamedNetns::new("client");
    sh(&format!(
        "ip link add vclient type veth peer name eth0 netns {c} && \
         ip addr add 192.168.100.1/24 dev vclient && ip link set vclient up && \
         ip -n {c} addr add 192.168.100.2/24 dev eth0 && ip -n {c} link set eth0 up && \
         ip -n {c} route add default via 192.168.100.1",
        c = client.name()
    ));

    // kube-proxy's shape: the VIP on a dummy link left down, masquerade real servers, weight 1.
    sh("ip link add kube-ipvs0 type dummy && ip addr add 10.96.0.10/32 dev kube-ipvs0");
    sh("ipvsadm -A -t 10.96.0.10:80 -s rr");
    sh("ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1");
    sh("ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.3:8080 -m -w 1");

    let vip = Ipv4Addr::new(10, 96, 0, 10);
    let answers: Vec<String> = (0..6).map(|_| ask(&client, vip, 80)).collect();
    let first = answers[0].clone();
    let second = if first == "pod1" { "pod2" } else { "pod1" };
    for (i, a) in answers.iter().enumerate() {
        let want = if i % 2 == 0 { first.as_str() } else { second };
        assert_eq!(
            a, want,
            "request {i} of {answers:?}: rr must alternate strictly"
        );
    }
    assert!(
        ["pod1", "pod2"].contains(&first.as_str()),
        "unexpected answer {first}"
    );

    // IPVS counted the connections on both real servers.
    let stats = sh("ipvsadm -Ln --stats");
    assert!(
        stats.contains("10.244.0.2:8080") && stats.contains("10.244.0.3:8080"),
        "{stats}"
    );
    println!("answers: {answers:?}");
    drop(pods);
}
