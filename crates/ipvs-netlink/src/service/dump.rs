//! Listing services: `IPVS_CMD_GET_SERVICE` with `NLM_F_DUMP`.

use futures::{Stream, StreamExt, TryStreamExt};

use super::get::service_of;
use super::{Service, ServiceHandle};
use crate::Result;
use crate::message::{Command, IpvsMessage};

impl ServiceHandle {
    /// Streams every service, in the kernel's (hash table) order (`ipvsadm -Ln`, without
    /// destinations).
    pub fn dump(&self) -> impl Stream<Item = Result<Service>> + use<> {
        self.handle
            .dump(IpvsMessage::new(Command::GetService, vec![]))
            .map(|m| m.and_then(|m| service_of(&m)))
    }

    /// Collects [`ServiceHandle::dump`].
    pub async fn list(&self) -> Result<Vec<Service>> {
        self.dump().try_collect().await
    }
}
