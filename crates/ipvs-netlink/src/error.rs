//! The crate's error type.

use std::io;

use netlink_packet_core::DecodeError;

/// What can go wrong talking to IPVS.
///
/// Kernel refusals keep their errno (as an [`io::Error`] made with
/// [`io::Error::from_raw_os_error`]), sorted into the variants callers usually branch on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel has no `IPVS` generic-netlink family: the `ip_vs` module is not loaded
    /// (`modprobe ip_vs`) or the kernel lacks IPVS.
    #[error("the IPVS generic netlink family is missing: load the ip_vs module (modprobe ip_vs)")]
    FamilyMissing(#[source] io::Error),
    /// The object already exists (`EEXIST`).
    #[error("already exists")]
    Exists(#[source] io::Error),
    /// The object does not exist (`ESRCH` for services, `ENOENT` for destinations,
    /// schedulers and persistence engines).
    #[error("not found")]
    NotFound(#[source] io::Error),
    /// The caller lacks `CAP_NET_ADMIN` (`EPERM`).
    #[error("permission denied (IPVS needs CAP_NET_ADMIN)")]
    PermissionDenied(#[source] io::Error),
    /// Any other errno the kernel answered with (`EINVAL`, `EBUSY`, ...).
    #[error("the kernel refused the request")]
    Kernel(#[source] io::Error),
    /// A message from the kernel could not be decoded.
    #[error("cannot decode a message from the kernel")]
    Decode(#[from] DecodeError),
    /// A message from the kernel decoded but does not carry what the request asked for.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// A value cannot be sent as asked (for example a destination without an address).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No two dumps in a row listed the same services: another network namespace kept adding
    /// or deleting services meanwhile (see `ServiceHandle::list_consistent`).
    #[error(
        "the IPVS service list did not settle in {dumps} dumps (another network namespace kept changing its services)"
    )]
    Unsettled {
        /// How many dumps were made.
        dumps: usize,
        /// Every service any of the dumps listed, sorted by key, each once: the best estimate
        /// left (a service of this namespace is missing only if every dump skipped it).
        seen: Vec<crate::Service>,
    },
    /// The netlink socket failed.
    #[error("netlink socket")]
    Io(#[from] io::Error),
    /// The background connection task has stopped.
    #[error("the netlink connection is closed")]
    ConnectionClosed,
}

impl Error {
    /// Sorts a kernel errno (positive, as in `errno.h`) into a variant.
    pub fn from_errno(errno: i32) -> Self {
        let source = io::Error::from_raw_os_error(errno);
        match errno {
            libc_errno::EEXIST => Error::Exists(source),
            libc_errno::ESRCH | libc_errno::ENOENT => Error::NotFound(source),
            libc_errno::EPERM => Error::PermissionDenied(source),
            _ => Error::Kernel(source),
        }
    }

    /// The kernel's errno, when the kernel refused the request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::FamilyMissing(e)
            | Error::Exists(e)
            | Error::NotFound(e)
            | Error::PermissionDenied(e)
            | Error::Kernel(e) => e.raw_os_error(),
            _ => None,
        }
    }

    /// True for [`Error::Exists`].
    pub fn is_exists(&self) -> bool {
        matches!(self, Error::Exists(_))
    }

    /// True for [`Error::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound(_))
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The few errno values the crate sorts on (Linux, every architecture).
pub(crate) mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const EEXIST: i32 = 17;
}
