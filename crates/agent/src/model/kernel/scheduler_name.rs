//! An IPVS scheduler's kernel name, and the schedulers the kernel has.

use std::borrow::Cow;
use std::fmt;

/// The schedulers of the kernel's IPVS (`net/netfilter/ipvs/ip_vs_*.c` that call
/// `register_ip_vs_scheduler`): the only names a Service's annotation may give.
pub const SCHEDULERS: &[&str] = &[
    "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos",
];

/// The name of a virtual server's scheduler.
///
/// One of the kernel's [`SCHEDULERS`] is held as a `&'static str`, so the many virtual servers
/// of a state (desired, planned, in the shadow) allocate nothing for it; any other name, as a
/// foreign virtual server read from the kernel may carry, is held as its own string.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchedulerName(Cow<'static, str>);

/// No name, as a virtual server made field by field starts (not one of the kernel's).
impl Default for SchedulerName {
    fn default() -> Self {
        SchedulerName(Cow::Owned(String::new()))
    }
}

impl SchedulerName {
    /// The name as the kernel spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether it is one of the kernel's [`SCHEDULERS`].
    pub fn is_kernels(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }
}

/// The kernel's own spelling of `name`, when it is one of its schedulers.
fn known(name: &str) -> Option<&'static str> {
    SCHEDULERS.iter().copied().find(|s| *s == name)
}

impl From<&str> for SchedulerName {
    fn from(name: &str) -> Self {
        SchedulerName(known(name).map_or_else(|| Cow::Owned(name.to_owned()), Cow::Borrowed))
    }
}

impl From<String> for SchedulerName {
    fn from(name: String) -> Self {
        SchedulerName(known(&name).map_or(Cow::Owned(name), Cow::Borrowed))
    }
}

impl PartialEq<str> for SchedulerName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SchedulerName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for SchedulerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for SchedulerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_schedulers_are_held_without_a_string_of_their_own() {
        for name in SCHEDULERS {
            let held = SchedulerName::from(*name);
            assert!(held.is_kernels(), "{name}");
            assert_eq!(held, SchedulerName::from(name.to_string()));
            assert_eq!(held.as_str(), *name);
        }
    }

    #[test]
    fn any_other_name_is_kept_as_read() {
        for name in ["RR", "ftp", "pe_sip", "", "rr "] {
            let held = SchedulerName::from(name);
            assert!(!held.is_kernels(), "{name:?}");
            assert_eq!(held, *name);
            assert_eq!(format!("{held} {held:?}"), format!("{name} {name:?}"));
        }
        assert_ne!(SchedulerName::from("rr"), SchedulerName::from("wrr"));
    }
}
