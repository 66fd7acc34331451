//! Editing a destination: `IPVS_CMD_SET_DEST` (`ipvsadm -e`).

use super::{Destination, DestinationHandle};
use crate::Result;
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::service::ServiceKey;

/// The request `ipvsadm -e` sends.
pub(crate) fn set_request(service: &ServiceKey, dest: &Destination) -> IpvsMessage {
    IpvsMessage::new(
        Command::SetDest,
        vec![
            MessageAttr::Service(service.to_attrs()),
            MessageAttr::Destination(dest.config_attrs()),
        ],
    )
}

impl DestinationHandle {
    /// Edits a destination's forwarding, weight, thresholds and tunnel (`ipvsadm -e`);
    /// [`Error::NotFound`](crate::Error::NotFound) if it does not exist.
    pub async fn set(&self, dest: &Destination) -> Result<()> {
        self.handle.execute(set_request(&self.service, dest)).await
    }
}
