//! The scheduler probe kube-proxy makes at start: a virtual server made with the configured
//! scheduler and deleted at once, so that a scheduler the kernel lacks is one clear error
//! instead of a failure per Service at every sync.

use std::net::Ipv4Addr;

use super::Error;

/// The probe's virtual server: TCP on TEST-NET-2 (198.51.100.0:20000), as kube-proxy's, an
/// address no Service has.
pub fn probe_key() -> ipvs_netlink::ServiceKey {
    ipvs_netlink::ServiceKey::tcp(Ipv4Addr::new(198, 51, 100, 0).into(), 20000)
}

/// Why a scheduler probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeFailure {
    /// The virtual servers could not be listed, so nothing was probed.
    #[error("cannot list IPVS services")]
    Unread(#[source] Error),
    /// The kernel refused a virtual server with the scheduler.
    #[error("the kernel refused the scheduler")]
    Refused(#[source] Error),
}
