//! Traffic through both programs: each node namespace gets the scenario's pods (namespaces on
//! a bridge, answering with their address and the source address they saw) and a client
//! outside; a step's probes send the same requests through each side, and what each side
//! answered becomes the `traffic` section, compared like the kernel state. A difference in
//! packets is explained by a README marker naming the packets that show it, or fails.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

use lab::guest::NamedNetns;
use lab::net::{client, within};
use peers::scenario::{Probe, Scenario};

use super::node::NodeNs;

/// How a request that got no answer is written.
const NO_ANSWER: &str = "no answer";

/// How long one request may take to connect and to be answered (emulation is slow).
const WAIT: Duration = Duration::from_secs(3);

/// The client's side of the veth to the node, and its own address.
const OUTSIDE_GATEWAY: &str = "192.168.60.1";
const OUTSIDE_CLIENT: &str = "192.168.60.2";

/// One side's pods and outside client; the namespaces go when dropped.
pub struct Pods {
    _pods: Vec<NamedNetns>,
    outside: NamedNetns,
    /// The node's first address (for `node:PORT`).
    node_ip: String,
}

impl Pods {
    /// Starts the scenario's pods on a bridge in `node` (its `.1` the gateway) and a client
    /// namespace behind a veth.
    pub fn start(node: &NodeNs, s: &Scenario) -> Pods {
        let gateway = s.pods[0]
            .rsplit_once('.')
            .map(|(net, _)| format!("{net}.1"))
            .expect("a pod address");
        node.ns.sh(&format!(
            "sysctl -qw net.ipv4.ip_forward=1 && ip link add pbr0 type bridge && \
             ip addr add {gateway}/24 dev pbr0 && ip link set pbr0 up"
        ));
        let mut pods = Vec::new();
        for (i, ip) in s.pods.iter().enumerate() {
            let pod = NamedNetns::new("pod");
            node.ns.sh(&format!(
                "ip link add pv{i} type veth peer name eth0 netns {p} && \
                 ip link set pv{i} master pbr0 up && bridge link set dev pv{i} hairpin on && \
                 ip -n {p} addr add {ip}/24 dev eth0 && ip -n {p} link set eth0 up && \
                 ip -n {p} link set lo up && ip -n {p} route add default via {gateway}",
                p = pod.name()
            ));
            for &port in &s.pod_ports {
                serve(&pod, ip, port);
            }
            pods.push(pod);
        }
        let ns_name = node.ns.name().to_string();
        let outside = within(&node.ns, move || {
            client(&format!("{ns_name}-out"), OUTSIDE_GATEWAY, OUTSIDE_CLIENT)
        });
        let node_ip = s.node.addresses[0]
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        Pods {
            _pods: pods,
            outside,
            node_ip,
        }
    }

    /// Sends `probe`'s requests from its side and says what came back, as one line, with
    /// how many were answered.
    pub fn probe(&self, node: &NodeNs, probe: &Probe) -> (String, usize) {
        let to = match probe.to.strip_prefix("node:") {
            Some(port) => format!("{}:{port}", self.node_ip),
            None => probe.to.clone(),
        };
        let addr: SocketAddr = to
            .parse()
            .unwrap_or_else(|e| panic!("probe address {to:?}: {e}"));
        let ns = if probe.from == "node" {
            &node.ns
        } else {
            &self.outside
        };
        let p = probe.clone();
        let answers: Vec<String> = within(ns, move || {
            (0..p.requests)
                .map(|_| {
                    let answer = match p.protocol.as_str() {
                        "udp" => ask_udp(addr, p.source_port.unwrap_or(0)),
                        "http" => ask_http(addr, p.path.as_deref().unwrap_or("/")),
                        _ => ask_tcp(addr),
                    };
                    answer.unwrap_or_else(|e| format!("{NO_ANSWER} ({})", error_kind(&e)))
                })
                .collect()
        });
        let answered = answers.iter().filter(|a| !a.starts_with(NO_ANSWER)).count();
        let line = format!(
            "{} {} from {}: {}",
            probe.protocol,
            probe.to,
            probe.from,
            summary(&answers, probe.shape)
        );
        (line, answered)
    }
}

/// A TCP and a UDP server on `port` in `pod`, answering `"IP saw SOURCE"`.
fn serve(pod: &NamedNetns, ip: &str, port: u16) {
    let (tx, rx) = mpsc::channel();
    let me = ip.to_string();
    pod.spawn(move || {
        let tcp = TcpListener::bind(("0.0.0.0", port)).expect("bind tcp in the pod");
        let udp = UdpSocket::bind(("0.0.0.0", port)).expect("bind udp in the pod");
        tx.send(()).expect("the harness waits");
        let name = me.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((_, from)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(format!("{name} saw {}\n", from.ip()).as_bytes(), from);
            }
        });
        for conn in tcp.incoming() {
            let Ok(mut conn) = conn else { continue };
            let seen = conn
                .peer_addr()
                .map(|a| a.ip().to_string())
                .unwrap_or_default();
            let _ = conn.write_all(format!("{me} saw {seen}\n").as_bytes());
        }
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("pod server started");
}

fn ask_tcp(addr: SocketAddr) -> std::io::Result<String> {
    let conn = TcpStream::connect_timeout(&addr, WAIT)?;
    conn.set_read_timeout(Some(WAIT))?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim().to_string())
}

fn ask_udp(addr: SocketAddr, source_port: u16) -> std::io::Result<String> {
    let sock = UdpSocket::bind(("0.0.0.0", source_port))?;
    sock.set_read_timeout(Some(WAIT))?;
    sock.send_to(b"?", addr)?;
    let mut buf = [0u8; 1500];
    let (n, _) = sock.recv_from(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// One GET: the status and, for a health-check node port's JSON, the fields that carry
/// meaning (the Service and its local endpoints), else the body.
fn ask_http(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut conn = TcpStream::connect_timeout(&addr, WAIT)?;
    conn.set_read_timeout(Some(WAIT))?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    conn.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).unwrap_or("?").to_string();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
    let body = match serde_json::from_str::<serde_json::Value>(body) {
        Ok(v) => format!(
            "service {}/{} localEndpoints {} serviceProxyHealthy {}",
            v["service"]["namespace"].as_str().unwrap_or("?"),
            v["service"]["name"].as_str().unwrap_or("?"),
            v["localEndpoints"],
            v["serviceProxyHealthy"]
        ),
        Err(_) => body.to_string(),
    };
    Ok(format!("HTTP {status} {body}"))
}

/// A request's failure, without the details that vary between runs.
fn error_kind(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timed out".into(),
        k => format!("{k:?}"),
    }
}

/// The answers as one line: each distinct answer with its count (or, for `shape`, only
/// how many distinct answers and their counts, largest first).
fn summary(answers: &[String], shape: bool) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for a in answers {
        *counts.entry(a).or_default() += 1;
    }
    if shape {
        let mut n: Vec<usize> = counts.values().copied().collect();
        n.sort_unstable_by(|a, b| b.cmp(a));
        let each: Vec<String> = n.iter().map(|n| format!("×{n}")).collect();
        format!("{} distinct answers: {}", n.len(), each.join(" "))
    } else {
        counts
            .iter()
            .map(|(a, n)| format!("{a} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::summary;

    #[test]
    fn summaries_count_answers_or_only_their_shape() {
        let a: Vec<String> = ["b", "a", "b"].iter().map(|s| s.to_string()).collect();
        assert_eq!(summary(&a, false), "a ×1, b ×2");
        assert_eq!(summary(&a, true), "2 distinct answers: ×2 ×1");
    }
}
