//! Reading one service: `IPVS_CMD_GET_SERVICE` without `NLM_F_DUMP`.

use super::{Service, ServiceHandle, ServiceKey};
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::{Error, Result};

impl ServiceHandle {
    /// Reads one service (`ipvsadm -Ln -t ADDR:PORT`, without its destinations);
    /// `Ok(None)` if it does not exist.
    pub async fn get(&self, key: &ServiceKey) -> Result<Option<Service>> {
        let request = IpvsMessage::new(
            Command::GetService,
            vec![MessageAttr::Service(key.to_attrs())],
        );
        match self.handle.query(request).await? {
            None => Ok(None),
            Some(reply) => service_of(&reply).map(Some),
        }
    }
}

/// The service a kernel message describes.
pub(crate) fn service_of(reply: &IpvsMessage) -> Result<Service> {
    reply
        .attrs
        .iter()
        .find_map(|a| match a {
            MessageAttr::Service(attrs) => Some(Service::from_attrs(attrs).map_err(Error::from)),
            _ => None,
        })
        .unwrap_or_else(|| Err(Error::UnexpectedReply("message without a service".into())))
}
