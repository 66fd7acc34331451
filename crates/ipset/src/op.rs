//! Operations for batches, written in `ipset restore` syntax by `Display`.
use std::fmt;

use crate::entry::{Entry, Member};
use crate::name::SetName;
use crate::set::{Header, Set};

/// One command of a batch; see [`crate::Session::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `ipset create`.
    Create(Header),
    /// `ipset destroy NAME`.
    Destroy(SetName),
    /// `ipset flush NAME`.
    Flush(SetName),
    /// `ipset rename FROM TO`.
    Rename {
        /// Current name.
        from: SetName,
        /// New name.
        to: SetName,
    },
    /// `ipset swap FIRST SECOND`.
    Swap {
        /// One set.
        first: SetName,
        /// The other.
        second: SetName,
    },
    /// `ipset add NAME ENTRY [options]`.
    Add {
        /// The set.
        set: SetName,
        /// Entry and options.
        member: Member,
    },
    /// `ipset del NAME ENTRY`.
    Del {
        /// The set.
        set: SetName,
        /// The entry.
        entry: Entry,
    },
}

impl Op {
    /// `Add` without options.
    pub fn add(set: &SetName, entry: Entry) -> Op {
        Op::Add {
            set: set.clone(),
            member: Member::new(entry),
        }
    }

    /// `Del`.
    pub fn del(set: &SetName, entry: Entry) -> Op {
        Op::Del {
            set: set.clone(),
            entry,
        }
    }

    /// `Create` of the set's header then `Add` of each member.
    pub fn restore(set: &Set) -> Vec<Op> {
        let mut ops = Vec::with_capacity(set.members.len() + 1);
        ops.push(Op::Create(set.header.clone()));
        ops.extend(set.members.iter().map(|m| Op::Add {
            set: set.header.name.clone(),
            member: m.clone(),
        }));
        ops
    }

    /// The set the operation is about (the first one for rename and swap).
    pub fn set(&self) -> &SetName {
        match self {
            Op::Create(h) => &h.name,
            Op::Destroy(s) | Op::Flush(s) => s,
            Op::Rename { from, .. } => from,
            Op::Swap { first, .. } => first,
            Op::Add { set, .. } | Op::Del { set, .. } => set,
        }
    }
}

impl fmt::Display for Op {
    /// One line of `ipset restore` input, without the newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create(h) => write!(f, "{h}"),
            Op::Destroy(s) => write!(f, "destroy {s}"),
            Op::Flush(s) => write!(f, "flush {s}"),
            Op::Rename { from, to } => write!(f, "rename {from} {to}"),
            Op::Swap { first, second } => write!(f, "swap {first} {second}"),
            Op::Add { set, member } => write!(f, "add {set} {member}"),
            Op::Del { set, entry } => write!(f, "del {set} {entry}"),
        }
    }
}
