//! Deleting a service: `IPVS_CMD_DEL_SERVICE` (`ipvsadm -D`).

use super::{ServiceHandle, ServiceKey};
use crate::Result;
use crate::message::{Command, IpvsMessage, MessageAttr};

/// The request `ipvsadm -D` sends.
pub(crate) fn del_request(key: &ServiceKey) -> IpvsMessage {
    IpvsMessage::new(
        Command::DelService,
        vec![MessageAttr::Service(key.to_attrs())],
    )
}

impl ServiceHandle {
    /// Deletes a service and its destinations (`ipvsadm -D`);
    /// [`Error::NotFound`](crate::Error::NotFound) if it does not exist.
    pub async fn del(&self, key: &ServiceKey) -> Result<()> {
        self.handle.execute(del_request(key)).await
    }

    /// Deletes a service if it exists (`ipvsadm -D`, a missing service is not an error).
    pub async fn del_if_exists(&self, key: &ServiceKey) -> Result<()> {
        match self.del(key).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }
}
