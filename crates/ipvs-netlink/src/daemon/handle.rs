//! The daemons branch of the handle tree: `IPVS_CMD_NEW_DAEMON`, `_DEL_DAEMON`,
//! `_GET_DAEMON`.

use futures::{StreamExt, TryStreamExt};

use super::{DaemonAttr, DaemonState, SyncDaemon};
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::{Error, Handle, Result};

/// Requests about sync daemons, from [`Handle::daemons`].
#[derive(Clone, Debug)]
pub struct DaemonHandle {
    handle: Handle,
}

impl DaemonHandle {
    pub(crate) fn new(handle: Handle) -> Self {
        DaemonHandle { handle }
    }

    /// Starts a sync daemon (`ipvsadm --start-daemon STATE --mcast-interface IF ...`).
    pub async fn start(&self, daemon: &SyncDaemon) -> Result<()> {
        self.handle
            .execute(IpvsMessage::new(
                Command::NewDaemon,
                vec![MessageAttr::Daemon(daemon.to_attrs())],
            ))
            .await
    }

    /// Stops the daemon in `state` (`ipvsadm --stop-daemon STATE`).
    pub async fn stop(&self, state: DaemonState) -> Result<()> {
        self.handle
            .execute(IpvsMessage::new(
                Command::DelDaemon,
                vec![MessageAttr::Daemon(vec![DaemonAttr::State(state.to_raw())])],
            ))
            .await
    }

    /// Lists the running daemons (`ipvsadm -L --daemon`).
    pub async fn list(&self) -> Result<Vec<SyncDaemon>> {
        self.handle
            .dump(IpvsMessage::new(Command::GetDaemon, vec![]))
            .map(|m| {
                let m = m?;
                m.attrs
                    .iter()
                    .find_map(|a| match a {
                        MessageAttr::Daemon(attrs) => {
                            Some(SyncDaemon::from_attrs(attrs).map_err(Error::from))
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| {
                        Err(Error::UnexpectedReply("message without a daemon".into()))
                    })
            })
            .try_collect()
            .await
    }
}
