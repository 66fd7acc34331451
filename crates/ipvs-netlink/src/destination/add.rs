//! Adding a destination: `IPVS_CMD_NEW_DEST` (`ipvsadm -a`).

use super::{Destination, DestinationHandle};
use crate::Result;
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::service::ServiceKey;

/// The request `ipvsadm -a` sends: the service's key, then the destination.
pub(crate) fn add_request(service: &ServiceKey, dest: &Destination) -> IpvsMessage {
    IpvsMessage::new(
        Command::NewDest,
        vec![
            MessageAttr::Service(service.to_attrs()),
            MessageAttr::Destination(dest.config_attrs()),
        ],
    )
}

impl DestinationHandle {
    /// Adds a destination (`ipvsadm -a`); [`Error::Exists`](crate::Error::Exists) if it
    /// exists, [`Error::NotFound`](crate::Error::NotFound) if the service does not.
    pub async fn add(&self, dest: &Destination) -> Result<()> {
        self.handle.execute(add_request(&self.service, dest)).await
    }

    /// Adds a destination, or edits it to match if it exists (`ipvsadm -a`, then `-e`).
    pub async fn add_or_update(&self, dest: &Destination) -> Result<()> {
        match self.add(dest).await {
            Err(e) if e.is_exists() => self.set(dest).await,
            other => other,
        }
    }
}
