//! Adding a service: `IPVS_CMD_NEW_SERVICE` (`ipvsadm -A`).

use super::{Service, ServiceHandle};
use crate::Result;
use crate::message::{Command, IpvsMessage, MessageAttr};

/// The request `ipvsadm -A` sends.
pub(crate) fn add_request(service: &Service) -> IpvsMessage {
    IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(service.config_attrs())],
    )
}

impl ServiceHandle {
    /// Adds a service (`ipvsadm -A`); [`Error::Exists`](crate::Error::Exists) if it exists.
    pub async fn add(&self, service: &Service) -> Result<()> {
        self.handle.execute(add_request(service)).await
    }

    /// Adds a service, or edits it to match if it exists (`ipvsadm -A`, then `-E`).
    pub async fn add_or_update(&self, service: &Service) -> Result<()> {
        match self.add(service).await {
            Err(e) if e.is_exists() => self.set(service).await,
            other => other,
        }
    }
}
