//! IPVS version and connection table size: `IPVS_CMD_GET_INFO`.

use std::fmt;

use crate::message::MessageAttr;
use crate::{Error, Result};

/// The IPVS version (`IP_VS_VERSION_CODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major.
    pub major: u8,
    /// Minor.
    pub minor: u8,
    /// Patch.
    pub patch: u8,
}

impl Version {
    /// From the kernel's code, `major << 16 | minor << 8 | patch`.
    pub fn from_code(code: u32) -> Self {
        Version {
            major: (code >> 16) as u8,
            minor: (code >> 8) as u8,
            patch: code as u8,
        }
    }

    /// The kernel's code.
    pub fn code(self) -> u32 {
        u32::from(self.major) << 16 | u32::from(self.minor) << 8 | u32::from(self.patch)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What `ipvsadm -L` prints in its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// The IPVS version.
    pub version: Version,
    /// Buckets of the connection hash table.
    pub connection_table_size: u32,
}

impl Info {
    /// Reads the `IPVS_INFO_ATTR_*` attributes of a `SET_INFO` reply.
    pub fn from_attrs(attrs: &[MessageAttr]) -> Result<Self> {
        let mut version = None;
        let mut size = None;
        for a in attrs {
            match *a {
                MessageAttr::Version(v) => version = Some(Version::from_code(v)),
                MessageAttr::ConnTableSize(s) => size = Some(s),
                _ => {}
            }
        }
        match (version, size) {
            (Some(version), Some(connection_table_size)) => Ok(Info {
                version,
                connection_table_size,
            }),
            _ => Err(Error::UnexpectedReply(
                "info without version or size".into(),
            )),
        }
    }

    /// The two attributes, as the kernel sends them.
    pub fn to_attrs(&self) -> Vec<MessageAttr> {
        vec![
            MessageAttr::Version(self.version.code()),
            MessageAttr::ConnTableSize(self.connection_table_size),
        ]
    }
}
