//! A real server's address and port in 20 bytes.
//!
//! `SocketAddr` is 32 bytes, because an IPv6 one carries a flow label and a scope, which IPVS
//! real servers never have. A cold plan holds one operation per real server, and the desired
//! and observed states one map entry each: at 10,000 Services of 5 endpoints the 12 bytes cut
//! from each are the largest part of the plan's peak (BENCHMARKS.md, memory).

use std::fmt;
use std::net::{AddrParseError, IpAddr, SocketAddr};
use std::str::FromStr;

/// A real server: an address and a port. Orders, prints and parses as the `SocketAddr` of
/// the same address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RealServer {
    ip: IpAddr,
    port: u16,
}

impl RealServer {
    /// The real server at `ip`, `port`.
    pub const fn new(ip: IpAddr, port: u16) -> Self {
        RealServer { ip, port }
    }

    /// Its address.
    pub const fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Its port.
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// As a socket address (no flow label, no scope).
    pub const fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

impl From<SocketAddr> for RealServer {
    fn from(addr: SocketAddr) -> Self {
        RealServer::new(addr.ip(), addr.port())
    }
}

impl From<RealServer> for SocketAddr {
    fn from(rs: RealServer) -> Self {
        rs.socket_addr()
    }
}

impl fmt::Display for RealServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.socket_addr().fmt(f)
    }
}

impl FromStr for RealServer {
    type Err = AddrParseError;

    /// `10.0.0.1:80` or `[fd00::1]:80`, as a `SocketAddr`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<SocketAddr>().map(RealServer::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_server_is_20_bytes() {
        assert_eq!(std::mem::size_of::<RealServer>(), 20);
    }

    #[test]
    fn orders_prints_and_parses_as_its_socket_address() {
        let texts = [
            "10.0.0.1:80",
            "10.0.0.1:8080",
            "10.0.0.2:1",
            "[fd00::1]:80",
            "[fd00::2]:1",
        ];
        let socket: Vec<SocketAddr> = texts.iter().map(|t| t.parse().unwrap()).collect();
        let real: Vec<RealServer> = texts.iter().map(|t| t.parse().unwrap()).collect();
        for (s, r) in socket.iter().zip(&real) {
            assert_eq!(r.to_string(), s.to_string());
            assert_eq!(SocketAddr::from(*r), *s);
        }
        for i in 0..texts.len() {
            for j in 0..texts.len() {
                assert_eq!(real[i].cmp(&real[j]), socket[i].cmp(&socket[j]), "{i} {j}");
            }
        }
        assert!("10.0.0.1".parse::<RealServer>().is_err());
    }
}
