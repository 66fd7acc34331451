//! The agent's HTTP servers, on hyper: `/healthz`, `/livez` and `/readyz` on
//! `healthzBindAddress`, `/metrics` on `metricsBindAddress`, and the per-Service health-check
//! node ports.
//!
//! Every server is HTTP/1 only and answers one request per connection (`Connection: close`):
//! load-balancer probes, kubelet, Prometheus and curl all ask one question per connection or
//! cope with that, and it keeps an idle peer from holding a connection open. Each server is
//! bounded as a public port must be ([`Limits`]): a peer has a few seconds to send its request
//! head, the whole exchange (the answer written included) has a deadline, and the server holds
//! at most a fixed number of connections.
//!
//! A full server still accepts: it makes room by cutting the oldest connection of the source
//! that holds the most (`Open`). Leaving peers in the kernel's accept queue instead, as a
//! semaphore taken before `accept` does, let one host that refilled a few hundred slow
//! connections every header timeout keep kubelet's probe, or a load balancer's, waiting
//! behind them: the agent was restarted, or the node drained, from outside. Now a hostile
//! source only cuts its own connections, and a probe from anywhere else is answered.
//! Handlers are plain functions of a [`Request`]: they read shared state and never block.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONNECTION, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, Id, JoinSet};
use tracing::{debug, warn};

/// kube-proxy's retry interval for a server that failed to bind.
pub const BIND_RETRY: Duration = Duration::from_secs(5);

/// What one server allows a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a peer may take to send its whole request head.
    pub header_read: Duration,
    /// How long one connection may last from its accept to the last byte of the answer
    /// written: a peer that reads the answer too slowly is cut off.
    pub connection: Duration,
    /// Connections served at once; one more cuts the oldest of the busiest source.
    pub connections: usize,
    /// The largest request head read (hyper's buffer; at least 8 KiB).
    pub max_head: usize,
}

impl Default for Limits {
    /// Go's `http.Server` as kube-proxy configures it has no read timeout at all; these bound
    /// a slow or hostile peer while leaving probes, which answer in milliseconds, untouched.
    fn default() -> Self {
        Self {
            header_read: Duration::from_secs(10),
            connection: Duration::from_secs(15),
            connections: 256,
            max_head: 16 * 1024,
        }
    }
}

/// The parts of a request the servers look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The path, without the query string.
    pub path: String,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Length`, `Date` and `Connection`.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: String,
}

impl Response {
    /// A response with a `Content-Type`.
    pub fn new(status: u16, content_type: &str, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![("Content-Type", content_type.to_string())],
            body: body.into(),
        }
    }

    /// A JSON response with `X-Content-Type-Options: nosniff`, as kube-proxy's health servers
    /// send.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        let mut r = Self::new(status, "application/json", body);
        r.headers
            .push(("X-Content-Type-Options", "nosniff".to_string()));
        r
    }

    /// `404 page not found`, as Go's `http.NotFound`.
    pub fn not_found() -> Self {
        Self::new(404, "text/plain; charset=utf-8", "404 page not found\n")
    }

    /// The hyper response; a status or header hyper refuses becomes a 500 (handlers only
    /// build constant names and ASCII values, so that is a bug, not a peer's doing).
    fn into_hyper(self) -> hyper::Response<Full<Bytes>> {
        let mut builder = hyper::Response::builder().status(self.status);
        for (name, value) in &self.headers {
            builder = builder.header(*name, value.as_str());
        }
        let r = builder
            .header(CONNECTION, HeaderValue::from_static("close"))
            .body(Full::new(Bytes::from(self.body)));
        r.unwrap_or_else(|e| {
            warn!(error = %e, "a handler built an invalid response");
            let mut r = hyper::Response::new(Full::new(Bytes::from_static(b"internal error\n")));
            *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            r
        })
    }
}

/// Something that answers requests; it must not block (it runs on the runtime's threads).
pub trait Handler: Send + Sync + 'static {
    /// The answer to `request`.
    fn handle(&self, request: &Request) -> Response;
}

impl<F> Handler for F
where
    F: Fn(&Request) -> Response + Send + Sync + 'static,
{
    fn handle(&self, request: &Request) -> Response {
        self(request)
    }
}

/// The accept queue asked of the kernel (which caps it at `net.core.somaxconn`, 4096 by
/// default since Linux 5.4): a burst of connections waits there for [`serve`] to accept and
/// sort it, instead of having its SYNs dropped, a probe's among them.
pub const LISTEN_BACKLOG: i32 = 4096;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`]; with `v6_only`, an IPv6 socket takes
/// IPv6 only (`IPV6_V6ONLY`, as Go's `tcp6` listeners).
pub fn listen(addr: SocketAddr, v6_only: bool) -> io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(v6_only)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// Binds `addr`. A failure is retried every [`BIND_RETRY`], as kube-proxy does, unless
/// `hard_fail` (`bindAddressHardFail`), when it is returned.
pub async fn bind(addr: SocketAddr, hard_fail: bool, what: &str) -> io::Result<TcpListener> {
    loop {
        match listen(addr, false) {
            Ok(l) => return Ok(l),
            Err(e) if hard_fail => return Err(e),
            Err(e) => {
                warn!(%addr, error = %e, "cannot start the {what} server; retrying in 5s");
                tokio::time::sleep(BIND_RETRY).await;
            }
        }
    }
}

/// Answers every connection on `listener` with `handler` within `limits`, until the task is
/// dropped, which ends the connections in progress too (none outlives its server).
pub async fn serve(listener: TcpListener, handler: Arc<dyn Handler>, limits: Limits) {
    let mut open = Open::new(limits.connections);
    let mut connections = JoinSet::new();
    loop {
        let accepted = listener.accept().await;
        // Finished connections leave here, so that the set and `open` hold only open ones.
        while let Some(done) = connections.try_join_next_with_id() {
            let _ = open.remove(done.map_or_else(|e| e.id(), |(id, ())| id));
        }
        match accepted {
            Ok((stream, peer)) => {
                let from = source(peer.ip());
                if let Some(cut) = open.make_room(from) {
                    debug!(%peer, "the server is full: cut the oldest connection of the busiest source");
                    cut.abort();
                }
                let handler = Arc::clone(&handler);
                let task = connections.spawn(answer(stream, peer, handler, limits));
                open.insert(from, task);
            }
            Err(e) => {
                // Usually EMFILE: back off instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Where a connection comes from, for [`Open`]'s fairness: the IPv4 address, or the IPv6 /64,
/// which one host usually holds whole.
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

/// The open connections of one server, by source, oldest first.
#[derive(Debug)]
struct Open {
    cap: usize,
    /// Each connection's source and its order of arrival.
    by_task: HashMap<Id, (IpAddr, u64)>,
    /// Each source's connections, by order of arrival.
    by_source: HashMap<IpAddr, BTreeMap<u64, AbortHandle>>,
    next: u64,
}

impl Open {
    fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            by_task: HashMap::new(),
            by_source: HashMap::new(),
            next: 0,
        }
    }

    fn len(&self) -> usize {
        self.by_task.len()
    }

    fn insert(&mut self, source: IpAddr, task: AbortHandle) {
        self.next += 1;
        self.by_task.insert(task.id(), (source, self.next));
        self.by_source
            .entry(source)
            .or_default()
            .insert(self.next, task);
    }

    /// Takes connection `id` out (a finished or a cut one), with its handle.
    fn remove(&mut self, id: Id) -> Option<AbortHandle> {
        let (source, seq) = self.by_task.remove(&id)?;
        let tasks = self.by_source.get_mut(&source)?;
        let task = tasks.remove(&seq);
        if tasks.is_empty() {
            self.by_source.remove(&source);
        }
        task
    }

    /// When full, before a connection from `newcomer` is added: takes out and returns the
    /// oldest connection of the source holding the most (the newcomer's own counted one
    /// more, so that a source at a tie cuts its own), the oldest of them at a tie.
    fn make_room(&mut self, newcomer: IpAddr) -> Option<AbortHandle> {
        if self.len() < self.cap {
            return None;
        }
        let (_, victim) = self
            .by_source
            .iter()
            .filter_map(|(source, tasks)| {
                let (seq, task) = tasks.first_key_value()?;
                let held = tasks.len() + usize::from(*source == newcomer);
                // The most held first, then the oldest.
                Some(((held, std::cmp::Reverse(*seq)), task.id()))
            })
            .max_by_key(|(key, _)| *key)?;
        self.remove(victim)
    }
}

/// Answers the one request of the connection `stream` from `peer`, within `limits`.
async fn answer(stream: TcpStream, peer: SocketAddr, handler: Arc<dyn Handler>, limits: Limits) {
    let service = service_fn(move |request: hyper::Request<Incoming>| {
        let request = Request {
            method: request.method().as_str().to_string(),
            path: request.uri().path().to_string(),
        };
        let response = handler.handle(&request).into_hyper();
        std::future::ready(Ok::<_, Infallible>(response))
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .max_buf_size(limits.max_head.max(8192))
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(limits.connection, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(%peer, error = %e, "HTTP connection failed"),
        Err(_) => debug!(%peer, "HTTP connection cut at its deadline"),
    }
}

/// [`bind`], then [`serve`] with the default [`Limits`]: runs until dropped, or returns the
/// bind error when `hard_fail`.
pub async fn run(
    addr: SocketAddr,
    handler: Arc<dyn Handler>,
    hard_fail: bool,
    what: &str,
) -> io::Result<()> {
    let listener = bind(addr, hard_fail, what).await?;
    tracing::info!(%addr, "{what} server listening");
    serve(listener, handler, Limits::default()).await;
    Ok(())
}

/// A header of an answer [`get`] read, whatever its case.
#[cfg(test)]
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Sends `GET path` to `addr` with a plain HTTP/1.1 request and returns the status, the
/// headers and the body (for tests: the answer is read to the end of the connection).
#[cfg(test)]
pub async fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, Vec<(String, String)>, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: test\r\n\r\n");
    exchange(addr, request.as_bytes()).await
}

/// Writes `raw` to `addr` and parses the answer read to the end of the connection.
#[cfg(test)]
pub async fn exchange(
    addr: SocketAddr,
    raw: &[u8],
) -> io::Result<(u16, Vec<(String, String)>, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(raw).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no HTTP head"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no status"))?;
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok((status, headers, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn server(limits: Limits) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Arc<dyn Handler> = Arc::new(|r: &Request| match r.path.as_str() {
            "/x" => Response::new(200, "text/plain", format!("{} x", r.method)),
            "/big" => Response::new(200, "text/plain", "y".repeat(8 << 20)),
            _ => Response::not_found(),
        });
        (addr, tokio::spawn(serve(listener, handler, limits)))
    }

    #[tokio::test]
    async fn answers_paths_head_and_garbage() {
        let (addr, server) = server(Limits::default()).await;
        let (status, headers, body) = get(addr, "/x?verbose=1").await.unwrap();
        assert_eq!((status, body.as_str()), (200, "GET x"));
        assert_eq!(header(&headers, "content-type"), Some("text/plain"));
        assert_eq!(header(&headers, "connection"), Some("close"));
        assert_eq!(header(&headers, "content-length"), Some("5"));
        let (status, _, body) = get(addr, "/nope").await.unwrap();
        assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
        // HEAD: the head only.
        let (status, headers, body) = exchange(addr, b"HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (200, ""));
        assert_eq!(header(&headers, "content-length"), Some("6"));
        // Garbage gets a 400 or a closed connection, not a hang or a crash.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"HELLO\r\n\r\n").await.unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        assert!(out.is_empty() || out.starts_with("HTTP/1.1 400 "), "{out}");
        server.abort();
    }

    #[tokio::test]
    async fn a_peer_that_never_finishes_its_head_is_cut_off() {
        let limits = Limits {
            header_read: Duration::from_millis(300),
            ..Limits::default()
        };
        let (addr, server) = server(limits).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n")
            .await
            .unwrap();
        let t = Instant::now();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the connection stayed open");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        server.abort();
    }

    #[tokio::test]
    async fn a_peer_that_does_not_read_its_answer_is_cut_off_at_the_deadline() {
        let limits = Limits {
            connection: Duration::from_millis(500),
            ..Limits::default()
        };
        let (addr, server) = server(limits).await;
        // 8 MiB answered to a peer that reads nothing: the socket buffers fill, the write
        // stalls, and the deadline closes the connection.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let got = read.expect("the connection was closed").unwrap_or(0);
        assert!(got < 8 << 20, "the whole answer arrived: {got} bytes");
        server.abort();
    }

    /// A connection from `from` to `addr` (loopback: every 127/8 address is the host's).
    async fn connect_from(from: [u8; 4], addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        socket.connect(addr).await.unwrap()
    }

    /// Whether the server has closed `s` (it has read nothing of it).
    async fn closed(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn a_full_server_cuts_the_busiest_sources_oldest_connection_not_a_new_peer() {
        let limits = Limits {
            connections: 4,
            ..Limits::default()
        };
        let (addr, server) = server(limits).await;
        // One source holds every place with connections that never send their head.
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(connect_from([127, 0, 0, 2], addr).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A peer from elsewhere is answered at once, where it used to wait for the header
        // timeout (10 s) of a held connection; the busiest source lost its oldest.
        let t = Instant::now();
        let mut probe = connect_from([127, 0, 0, 1], addr).await;
        probe
            .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), probe.read_to_string(&mut out))
            .await
            .expect("answered")
            .unwrap();
        assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(
            closed(&mut held[0]).await,
            "the oldest held connection is open"
        );
        // More from the same source: the first takes the place the answered probe left, the
        // next ones cut the source's own, oldest first.
        for _ in 0..3 {
            held.push(connect_from([127, 0, 0, 2], addr).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (i, s) in held.iter_mut().enumerate().skip(1).take(2) {
            assert!(closed(s).await, "held connection {i} is open");
        }
        assert!(!closed(&mut held[3]).await, "held connection 3 was cut");
        // A quiet peer from a third source, then the busy one again: the quiet one stays.
        let mut quiet = connect_from([127, 0, 0, 3], addr).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        for _ in 0..4 {
            held.push(connect_from([127, 0, 0, 2], addr).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        quiet
            .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), quiet.read_to_string(&mut out))
            .await
            .expect("answered")
            .unwrap();
        assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
        server.abort();
    }

    #[test]
    fn sources_are_hosts_and_ipv6_slash_64s() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(source(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(source(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(source(ip("2001:db8:1:2:a:b:c:d")), ip("2001:db8:1:2::"));
    }

    #[tokio::test]
    async fn a_server_stopped_ends_its_connections_in_progress() {
        let (addr, server) = server(Limits::default()).await;
        // A peer midway through its head: the server would wait 10 s for the rest.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /x HTTP/1.1\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.abort();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the connection outlived its server");
    }

    #[tokio::test]
    async fn hard_fail_returns_the_bind_error() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let handler: Arc<dyn Handler> = Arc::new(|_: &Request| Response::not_found());
        let err = run(addr, handler, true, "test").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }
}
