//! Connection timeouts: `IPVS_CMD_GET_CONFIG` / `IPVS_CMD_SET_CONFIG` (`ipvsadm --set`).

use std::time::Duration;

use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::{Error, Handle, Result};

/// The timeouts of TCP, TCP after FIN, and UDP connections. On a set, a zero duration
/// leaves that timeout unchanged (as `ipvsadm --set 0 ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeouts {
    /// Established TCP connections.
    pub tcp: Duration,
    /// TCP connections after a FIN.
    pub tcp_fin: Duration,
    /// UDP "connections".
    pub udp: Duration,
}

fn secs(d: Duration) -> u32 {
    u32::try_from(d.as_secs()).unwrap_or(u32::MAX)
}

impl Timeouts {
    /// The three top-level attributes, in ipvsadm's order.
    pub fn to_attrs(&self) -> Vec<MessageAttr> {
        vec![
            MessageAttr::TimeoutTcp(secs(self.tcp)),
            MessageAttr::TimeoutTcpFin(secs(self.tcp_fin)),
            MessageAttr::TimeoutUdp(secs(self.udp)),
        ]
    }

    /// Reads the timeouts from a message's attributes (missing ones are zero).
    pub fn from_attrs(attrs: &[MessageAttr]) -> Self {
        let mut t = Timeouts::default();
        for a in attrs {
            match *a {
                MessageAttr::TimeoutTcp(v) => t.tcp = Duration::from_secs(v.into()),
                MessageAttr::TimeoutTcpFin(v) => t.tcp_fin = Duration::from_secs(v.into()),
                MessageAttr::TimeoutUdp(v) => t.udp = Duration::from_secs(v.into()),
                _ => {}
            }
        }
        t
    }
}

/// The request `ipvsadm --set` sends.
pub(crate) fn set_request(t: &Timeouts) -> IpvsMessage {
    IpvsMessage::new(Command::SetConfig, t.to_attrs())
}

/// Requests about timeouts, from [`Handle::timeouts`].
#[derive(Clone, Debug)]
pub struct TimeoutHandle {
    handle: Handle,
}

impl TimeoutHandle {
    pub(crate) fn new(handle: Handle) -> Self {
        TimeoutHandle { handle }
    }

    /// Reads the timeouts (`ipvsadm -L --timeout`).
    pub async fn get(&self) -> Result<Timeouts> {
        let reply = self
            .handle
            .query(IpvsMessage::new(Command::GetConfig, vec![]))
            .await?
            .ok_or_else(|| Error::UnexpectedReply("no answer to GET_CONFIG".into()))?;
        Ok(Timeouts::from_attrs(&reply.attrs))
    }

    /// Sets the timeouts; zero leaves one unchanged (`ipvsadm --set TCP TCPFIN UDP`).
    pub async fn set(&self, timeouts: &Timeouts) -> Result<()> {
        self.handle.execute(set_request(timeouts)).await
    }
}
