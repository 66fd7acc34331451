//! Small network topologies for kernel tests, made of named namespaces: pods on a bridge that
//! answer each TCP connection (or UDP datagram) with their name, and clients outside.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::guest::{NamedNetns, sh};

/// A host-side veth name unique in the guest (interface names are at most 15 bytes).
fn veth_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("lveth{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The pod bridge of a test: `cni0` with `gateway/24`, in the test's own namespace.
pub fn bridge(gateway: &str) {
    sh("sysctl -qw net.ipv4.ip_forward=1");
    sh(&format!(
        "ip link add cni0 type bridge && ip addr add {gateway}/24 dev cni0 && ip link set cni0 up"
    ));
}

/// A pod: a namespace on `cni0` with servers on `ports` (dual-stack sockets) answering with
/// the pod's name. Its bridge port is in hairpin mode, as the CNI bridge plugin sets it, so
/// the pod can reach itself through a Service.
pub struct Pod {
    /// The pod's namespace.
    pub ns: NamedNetns,
    /// Its address.
    pub ip: IpAddr,
    /// Its name, the servers' answer.
    pub name: String,
}

impl Pod {
    /// Starts pod `name` at `ip` (in the bridge's /24, default route via `gateway`), with a
    /// TCP and a UDP server on each of `ports`.
    pub fn start(name: &str, ip: &str, gateway: &str, ports: &[u16]) -> Pod {
        let ns = NamedNetns::new(name);
        let host_end = veth_name();
        sh(&format!(
            "ip link add {host_end} type veth peer name eth0 netns {n} && \
             ip link set {host_end} master cni0 up && \
             bridge link set dev {host_end} hairpin on && \
             ip -n {n} addr add {ip}/24 dev eth0 && ip -n {n} link set eth0 up && \
             ip -n {n} route add default via {gateway}",
            n = ns.name()
        ));
        for &port in ports {
            let (tx, rx) = mpsc::channel();
            let reply = format!("{name}\n");
            ns.spawn(move || {
                let tcp = TcpListener::bind(("::", port)).expect("bind tcp in the pod");
                let udp = UdpSocket::bind(("::", port)).expect("bind udp in the pod");
                tx.send(()).unwrap();
                let answer = reply.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1500];
                    while let Ok((_, from)) = udp.recv_from(&mut buf) {
                        let _ = udp.send_to(answer.as_bytes(), from);
                    }
                });
                for conn in tcp.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    // Say the name, then echo until the client closes: long-lived
                    // connections can be checked across agent restarts.
                    if conn.write_all(reply.as_bytes()).is_err() {
                        continue;
                    }
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 4096];
                        while let Ok(n) = conn.read(&mut buf) {
                            if n == 0 || conn.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    });
                }
            });
            rx.recv_timeout(Duration::from_secs(10))
                .expect("pod server started");
        }
        Pod {
            ns,
            ip: ip.parse().expect("pod address"),
            name: name.to_string(),
        }
    }
}

/// A client namespace linked to the test's namespace by a veth pair: `client_ip/24` inside,
/// `host_ip/24` on the test's side, default route via the test's namespace.
pub fn client(name: &str, host_ip: &str, client_ip: &str) -> NamedNetns {
    let ns = NamedNetns::new(name);
    let host_end = veth_name();
    sh(&format!(
        "ip link add {host_end} type veth peer name eth0 netns {c} && \
         ip addr add {host_ip}/24 dev {host_end} && ip link set {host_end} up && \
         ip -n {c} addr add {client_ip}/24 dev eth0 && ip -n {c} link set eth0 up && \
         ip -n {c} route add default via {host_ip}",
        c = ns.name()
    ));
    ns
}

/// Connects to `addr` over TCP and returns the name the server says first, or the error.
pub fn ask_tcp(addr: SocketAddr) -> Result<String, String> {
    open_tcp(addr).map(|(name, _)| name)
}

/// Connects to `addr` over TCP, reads the server's name and keeps the connection open: the
/// server then echoes what is written to it.
pub fn open_tcp(addr: SocketAddr) -> Result<(String, BufReader<TcpStream>), String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut name = String::new();
    r.read_line(&mut name)
        .map_err(|e| format!("read {addr}: {e}"))?;
    Ok((name.trim().to_string(), r))
}

/// Writes `line` on an open connection and returns the echo.
pub fn echo(conn: &mut BufReader<TcpStream>, line: &str) -> Result<String, String> {
    conn.get_mut()
        .write_all(format!("{line}\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut back = String::new();
    conn.read_line(&mut back)
        .map_err(|e| format!("read: {e}"))?;
    Ok(back.trim().to_string())
}

/// Sends one UDP datagram to `addr` and returns the answer (trimmed), or the error.
pub fn ask_udp(addr: SocketAddr) -> Result<String, String> {
    ask_udp_from(0, addr, Duration::from_secs(3))
}

/// Sends one datagram from local port `source_port` (0: any) to `addr` and waits up to `wait`
/// for the answer: with a fixed port, every call is the same conntrack flow.
///
/// The bind is retried for a while on `EADDRINUSE`: a process another test thread is
/// spawning holds a copy of every open descriptor, the previous call's socket included, until
/// it executes its program (std's sockets are close-on-exec), and under emulation that can
/// take a moment.
pub fn ask_udp_from(source_port: u16, addr: SocketAddr, wait: Duration) -> Result<String, String> {
    let any: std::net::IpAddr = if addr.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let bound = std::time::Instant::now();
    let s = loop {
        match UdpSocket::bind((any, source_port)) {
            Ok(s) => break s,
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && bound.elapsed() < Duration::from_secs(5) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("bind port {source_port}: {e}")),
        }
    };
    s.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
    s.send_to(b"?", addr)
        .map_err(|e| format!("send {addr}: {e}"))?;
    let mut buf = [0u8; 1500];
    let (n, _) = s
        .recv_from(&mut buf)
        .map_err(|e| format!("recv {addr}: {e}"))?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// Runs `f` inside namespace `ns` and returns its result.
pub fn within<T: Send + 'static>(ns: &NamedNetns, f: impl FnOnce() -> T + Send + 'static) -> T {
    ns.spawn(f)
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// GETs `path` from `addr` (HTTP/1.1, `Connection: close`, 5 s to answer): the status code
/// and the body, or why there is none (nothing listening yet, a cut answer). Tests read the
/// agent's and kube-proxy's health and metrics servers with it: two fixed requests on
/// loopback, which need no HTTP client library.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}
