//! Listing a service's destinations: `IPVS_CMD_GET_DEST` with `NLM_F_DUMP`.

use futures::{Stream, StreamExt, TryStreamExt};

use super::{Destination, DestinationHandle};
use crate::message::{Command, IpvsMessage, MessageAttr};
use crate::{Error, Result};

impl DestinationHandle {
    /// Streams the service's destinations in the kernel's order (the `->` lines of
    /// `ipvsadm -Ln`).
    pub fn dump(&self) -> impl Stream<Item = Result<Destination>> + use<> {
        let family = self.service.family();
        self.handle
            .dump(IpvsMessage::new(
                Command::GetDest,
                vec![MessageAttr::Service(self.service.to_attrs())],
            ))
            .map(move |m| {
                let m = m?;
                m.attrs
                    .iter()
                    .find_map(|a| match a {
                        MessageAttr::Destination(attrs) => {
                            Some(Destination::from_attrs(attrs, family).map_err(Error::from))
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| {
                        Err(Error::UnexpectedReply(
                            "message without a destination".into(),
                        ))
                    })
            })
    }

    /// Collects [`DestinationHandle::dump`].
    pub async fn list(&self) -> Result<Vec<Destination>> {
        self.dump().try_collect().await
    }
}
