//! Deleting a destination: `IPVS_CMD_DEL_DEST` (`ipvsadm -d`).

use std::net::IpAddr;

use super::{Destination, DestinationHandle};
use crate::Result;
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::service::ServiceKey;

/// The request `ipvsadm -d` sends.
pub(crate) fn del_request(service: &ServiceKey, address: &IpAddr, port: u16) -> IpvsMessage {
    IpvsMessage::new(
        Command::DelDest,
        vec![
            MessageAttr::Service(service.to_attrs()),
            MessageAttr::Destination(Destination::key_attrs(address, port)),
        ],
    )
}

impl DestinationHandle {
    /// Deletes a destination (`ipvsadm -d`); [`Error::NotFound`](crate::Error::NotFound) if
    /// it (or its service) does not exist.
    pub async fn del(&self, address: &IpAddr, port: u16) -> Result<()> {
        self.handle
            .execute(del_request(&self.service, address, port))
            .await
    }

    /// Deletes a destination if it exists (`ipvsadm -d`, a missing one is not an error).
    pub async fn del_if_exists(&self, address: &IpAddr, port: u16) -> Result<()> {
        match self.del(address, port).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }
}
