//! Editing a service: `IPVS_CMD_SET_SERVICE` (`ipvsadm -E`).

use super::{Service, ServiceHandle};
use crate::Result;
use crate::message::{Command, IpvsMessage, MessageAttr};

/// The request `ipvsadm -E` sends.
pub(crate) fn set_request(service: &Service) -> IpvsMessage {
    IpvsMessage::new(
        Command::SetService,
        vec![MessageAttr::Service(service.config_attrs())],
    )
}

impl ServiceHandle {
    /// Edits a service's scheduler, flags, timeout, netmask and persistence engine
    /// (`ipvsadm -E`); [`Error::NotFound`](crate::Error::NotFound) if it does not exist.
    pub async fn set(&self, service: &Service) -> Result<()> {
        self.handle.execute(set_request(service)).await
    }
}
