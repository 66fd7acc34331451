//! The crate's error type.
use thiserror::Error;

use crate::name::SetName;

/// A result with this crate's [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong.
///
/// Kernel refusals carry libipset's own message (`message`) next to the typed reason, so
/// logs read like the `ipset` tool's.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A set name that the kernel would refuse or that `ipset save` syntax cannot carry.
    #[error("invalid set name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A value that cannot be sent as given (for example an IPv6 entry for an IPv4 set).
    #[error("invalid request for set {set}: {reason}")]
    Invalid {
        /// The set the request was for.
        set: String,
        /// What is wrong.
        reason: String,
    },
    /// Creating (or renaming to) a name that is taken.
    #[error("set {set} already exists: {message}")]
    SetExists {
        /// The set.
        set: String,
        /// libipset's message.
        message: String,
    },
    /// The named set does not exist.
    #[error("set {set} does not exist: {message}")]
    SetMissing {
        /// The set.
        set: String,
        /// libipset's message.
        message: String,
    },
    /// Adding an entry that is already in the set.
    #[error("entry {entry} already in set {set}: {message}")]
    EntryExists {
        /// The set.
        set: String,
        /// The entry, in `ipset save` syntax.
        entry: String,
        /// libipset's message.
        message: String,
    },
    /// Deleting an entry that is not in the set.
    #[error("entry {entry} not in set {set}: {message}")]
    EntryMissing {
        /// The set.
        set: String,
        /// The entry, in `ipset save` syntax.
        entry: String,
        /// libipset's message.
        message: String,
    },
    /// Any other refusal by the kernel or libipset (set in use, type mismatch, protocol...).
    #[error("ipset refused the request: {message}")]
    Refused {
        /// libipset's message.
        message: String,
    },
    /// One operation of a batch failed; operations before it were applied.
    #[error("operation {index} of the batch failed")]
    Batch {
        /// Index of the failing operation in the slice given to [`crate::Session::apply`].
        index: usize,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },
    /// libipset could not allocate or open its netlink session.
    #[error("cannot open an ipset session: {message}")]
    Session {
        /// libipset's message, if any.
        message: String,
    },
    /// Text in `ipset save` / `ipset restore` syntax that could not be parsed.
    #[error(transparent)]
    Parse(#[from] ParseError),
}

impl Error {
    /// The set this error is about, where there is one.
    pub fn set(&self) -> Option<&str> {
        match self {
            Error::Invalid { set, .. }
            | Error::SetExists { set, .. }
            | Error::SetMissing { set, .. }
            | Error::EntryExists { set, .. }
            | Error::EntryMissing { set, .. } => Some(set),
            Error::Batch { source, .. } => source.set(),
            _ => None,
        }
    }

    /// This error with any [`Error::Batch`] wrapping removed.
    pub fn innermost(&self) -> &Error {
        match self {
            Error::Batch { source, .. } => source.innermost(),
            other => other,
        }
    }

    pub(crate) fn invalid(set: &SetName, reason: impl Into<String>) -> Self {
        Error::Invalid {
            set: set.to_string(),
            reason: reason.into(),
        }
    }
}

/// A parse failure in `ipset save` / `ipset restore` text.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}{what}: {text:?}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct ParseError {
    /// 1-based line number, when parsing a whole document.
    pub line: Option<usize>,
    /// What was expected.
    pub what: String,
    /// The offending text.
    pub text: String,
}

impl ParseError {
    pub(crate) fn new(what: impl Into<String>, text: impl Into<String>) -> Self {
        ParseError {
            line: None,
            what: what.into(),
            text: text.into(),
        }
    }

    pub(crate) fn at_line(mut self, line: usize) -> Self {
        self.line.get_or_insert(line);
        self
    }
}
