//! The destinations branch of the handle tree.

use crate::Handle;
use crate::service::ServiceKey;

/// Requests about the destinations of one service, from [`Handle::destinations`].
#[derive(Clone, Debug)]
pub struct DestinationHandle {
    pub(crate) handle: Handle,
    pub(crate) service: ServiceKey,
}

impl DestinationHandle {
    pub(crate) fn new(handle: Handle, service: ServiceKey) -> Self {
        DestinationHandle { handle, service }
    }

    /// The service these destinations belong to.
    pub fn service(&self) -> &ServiceKey {
        &self.service
    }
}
