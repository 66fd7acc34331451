//! Set names, validated before they can reach libipset.
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The longest set name the kernel accepts, in bytes (`IPSET_MAXNAMELEN` less the NUL).
pub const MAX_NAME_LEN: usize = 31;

/// A valid ipset set name: 1 to 31 bytes, no NUL and no whitespace.
///
/// The kernel stores names in 32-byte buffers with a terminating NUL; whitespace is refused
/// too because a name with a space cannot be written in `ipset save` / `ipset restore` syntax.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetName(String);

impl SetName {
    /// Validates `name`.
    ///
    /// ```
    /// use libipset::SetName;
    /// assert!(SetName::new("KUBE-CLUSTER-IP").is_ok());
    /// assert!(SetName::new("a-name-that-is-longer-than-31-bytes").is_err());
    /// assert!(SetName::new("nul\0inside").is_err());
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let reason = if name.is_empty() {
            Some("empty")
        } else if name.len() > MAX_NAME_LEN {
            Some("longer than 31 bytes")
        } else if name.contains('\0') {
            Some("contains NUL")
        } else if name.chars().any(char::is_whitespace) {
            Some("contains whitespace")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidName { name, reason }),
            None => Ok(SetName(name)),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A NUL-terminated copy for C (cannot fail: the name has no NUL).
    pub(crate) fn to_c(&self) -> std::ffi::CString {
        std::ffi::CString::new(self.0.as_bytes()).expect("validated: no NUL")
    }
}

impl fmt::Display for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for SetName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for SetName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        SetName::new(s)
    }
}

impl TryFrom<&str> for SetName {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        SetName::new(s)
    }
}

impl TryFrom<String> for SetName {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        SetName::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_31_bytes_refuses_32() {
        assert!(SetName::new("a".repeat(31)).is_ok());
        assert!(matches!(
            SetName::new("a".repeat(32)),
            Err(Error::InvalidName {
                reason: "longer than 31 bytes",
                ..
            })
        ));
    }

    #[test]
    fn counts_bytes_not_chars() {
        // 16 two-byte characters: 32 bytes.
        assert!(SetName::new("é".repeat(16)).is_err());
        assert!(SetName::new("é".repeat(15)).is_ok());
    }

    #[test]
    fn refuses_empty_nul_space() {
        assert!(SetName::new("").is_err());
        assert!(SetName::new("a\0b").is_err());
        assert!(SetName::new("a b").is_err());
        assert!(SetName::new("a\tb").is_err());
    }
}
