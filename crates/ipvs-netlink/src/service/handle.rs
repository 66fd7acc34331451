//! The services branch of the handle tree.

use crate::{Handle, Result};

use super::ServiceKey;

/// Requests about virtual services, from [`Handle::services`].
#[derive(Clone, Debug)]
pub struct ServiceHandle {
    pub(crate) handle: Handle,
}

impl ServiceHandle {
    pub(crate) fn new(handle: Handle) -> Self {
        ServiceHandle { handle }
    }

    /// Zeroes one service's counters and its destinations' (`ipvsadm -Z -t ADDR:PORT`).
    pub async fn zero(&self, key: &ServiceKey) -> Result<()> {
        self.handle
            .execute(crate::handle::zero_request(Some(key)))
            .await
    }
}
