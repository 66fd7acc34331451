//! A minimal HTTP/1.1 responder on tokio, shared by `/healthz`, `/livez`, `/metrics` and the
//! per-Service health-check ports.
//!
//! Each connection gets one answer and is closed (`Connection: close`): load-balancer probes,
//! kubelet, Prometheus and curl all ask one question per connection or cope with that, and it
//! keeps a slow or hostile peer from holding more than one task for a bounded time.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

/// The largest request head read; longer ones get 431.
const MAX_HEAD: usize = 16 * 1024;
/// How long a peer may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// kube-proxy's retry interval for a server that failed to bind.
pub const BIND_RETRY: Duration = Duration::from_secs(5);

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
    /// Headers besides `Content-Length` and `Connection`.
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

    /// The bytes on the wire; `head_only` (for `HEAD`) leaves the body out.
    pub fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.body.len()
        ));
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Something that answers requests.
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

/// Parses a request head (`GET /healthz?x=1 HTTP/1.1\r\n...`); `None` if it is not HTTP.
pub fn parse_head(head: &[u8]) -> Option<Request> {
    let line_end = head.iter().position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?.trim_end();
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let version = parts.next()?;
    if method.is_empty() || !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or("/");
    Some(Request {
        method: method.to_string(),
        path: if path.is_empty() { "/" } else { path }.to_string(),
    })
}

/// Binds `addr`. A failure is retried every [`BIND_RETRY`], as kube-proxy does, unless
/// `hard_fail` (`bindAddressHardFail`), when it is returned.
pub async fn bind(addr: SocketAddr, hard_fail: bool, what: &str) -> io::Result<TcpListener> {
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if hard_fail => return Err(e),
            Err(e) => {
                warn!(%addr, error = %e, "cannot start the {what} server; retrying in 5s");
                tokio::time::sleep(BIND_RETRY).await;
            }
        }
    }
}

/// Answers every connection on `listener` with `handler`, until the task is dropped.
pub async fn serve(listener: TcpListener, handler: Arc<dyn Handler>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    if let Err(e) = answer(stream, handler.as_ref()).await {
                        debug!(%peer, error = %e, "HTTP connection failed");
                    }
                });
            }
            Err(e) => {
                // Usually EMFILE: back off instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// [`bind`], then [`serve`]: runs until dropped, or returns the bind error when `hard_fail`.
pub async fn run(
    addr: SocketAddr,
    handler: Arc<dyn Handler>,
    hard_fail: bool,
    what: &str,
) -> io::Result<()> {
    let listener = bind(addr, hard_fail, what).await?;
    tracing::info!(%addr, "{what} server listening");
    serve(listener, handler).await;
    Ok(())
}

async fn answer(mut stream: TcpStream, handler: &dyn Handler) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head = tokio::time::timeout(READ_TIMEOUT, async {
        let mut chunk = [0u8; 2048];
        loop {
            if let Some(end) = find_head_end(&buf) {
                return Ok(Some(end));
            }
            if buf.len() > MAX_HEAD {
                return Ok(None);
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the request head ended",
                ));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "request head timed out"))??;
    let (response, head_only) = match head.and_then(|end| parse_head(&buf[..end])) {
        Some(req) => (handler.handle(&req), req.method == "HEAD"),
        None if head.is_none() => (
            Response::new(431, "text/plain", "request head too large\n"),
            false,
        ),
        None => (Response::new(400, "text/plain", "bad request\n"), false),
    };
    stream.write_all(&response.encode(head_only)).await?;
    stream.shutdown().await
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .or_else(|| buf.windows(2).position(|w| w == b"\n\n").map(|p| p + 2))
}

/// Sends `GET path` to `addr` and returns the status, the headers and the body (for tests and
/// the lab).
pub async fn get(addr: SocketAddr, path: &str) -> io::Result<(u16, Vec<(String, String)>, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-proxy-ipvs\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
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

    #[test]
    fn request_heads() {
        type Case<'a> = (&'a [u8], Option<(&'a str, &'a str)>);
        let cases: &[Case] = &[
            (
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                Some(("GET", "/healthz")),
            ),
            (
                b"HEAD /livez?verbose=1 HTTP/1.0\r\n\r\n",
                Some(("HEAD", "/livez")),
            ),
            (
                b"GET http://n/x HTTP/1.1\r\n\r\n",
                Some(("GET", "http://n/x")),
            ),
            (b"GET ?a HTTP/1.1\r\n\r\n", Some(("GET", "/"))),
            (b"GET /\r\n\r\n", None),
            (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n", None),
            (b"GET / SPDY/3\r\n\r\n", None),
        ];
        for (head, want) in cases {
            let got = parse_head(head);
            assert_eq!(
                got.as_ref().map(|r| (r.method.as_str(), r.path.as_str())),
                *want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn responses_on_the_wire() {
        let r = Response::json(503, "{}");
        let text = String::from_utf8(r.encode(false)).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        );
        let head = String::from_utf8(r.encode(true)).unwrap();
        assert!(head.ends_with("Content-Length: 2\r\nConnection: close\r\n\r\n"));
    }

    #[tokio::test]
    async fn serves_over_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Arc<dyn Handler> = Arc::new(|r: &Request| match r.path.as_str() {
            "/x" => Response::new(200, "text/plain", format!("{} x", r.method)),
            _ => Response::not_found(),
        });
        let server = tokio::spawn(serve(listener, handler));
        let (status, headers, body) = get(addr, "/x").await.unwrap();
        assert_eq!((status, body.as_str()), (200, "GET x"));
        assert!(headers.contains(&("Content-Type".into(), "text/plain".into())));
        let (status, _, body) = get(addr, "/nope").await.unwrap();
        assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
        // Garbage gets a 400, not a hang or a crash.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"HELLO\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
        server.abort();
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
