//! The errors of loading a configuration: each wrong field named by its path.

use std::fmt;
use std::path::PathBuf;

use super::gates::GateError;
use super::interface::NameError;

/// One field that is wrong, named by its path in the file (`ipvs.syncPeriod`) or its flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `ipvs.excludeCIDRs[1]`, or `--flag`.
    pub field: String,
    /// What is wrong with it.
    pub message: Problem,
}

/// What is wrong with a field: typed where a caller or a test tells the cases apart, text
/// otherwise. The text is the error log's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// A feature gate's setting kube-proxy refuses.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// An interface name (or prefix) that cannot be used.
    #[error(transparent)]
    Interface(#[from] NameError),
    /// A proxy mode kube-proxy knows that kube-proxy-ipvs does not serve.
    #[error("{mode:?} is not served by kube-proxy-ipvs, which implements only \"ipvs\"")]
    ModeNotServed {
        /// The mode.
        mode: String,
    },
    /// `featureGates.KubeProxyIPVS: false`.
    #[error("false turns IPVS mode off; kube-proxy would refuse to start in ipvs mode")]
    IpvsGateOff,
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

impl From<String> for Problem {
    fn from(message: String) -> Self {
        Problem::Other(message)
    }
}

impl From<&str> for Problem {
    fn from(message: &str) -> Self {
        Problem::Other(message.to_string())
    }
}

impl FieldError {
    pub(super) fn new(field: impl Into<String>, message: impl Into<Problem>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A list of field errors, shown one after the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid YAML/JSON `KubeProxyConfiguration` (bad syntax or a value of
    /// the wrong type).
    #[error("{}{source}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    Decode {
        /// The path of the field that failed, empty for the document itself.
        field: String,
        /// The decoder's message, with line and column.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A value of the wrong type for its field (a quoted number where a number belongs, a
    /// bool where a string belongs), as Go's JSON decoder refuses it.
    #[error("{}{source}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
    Type {
        /// The path of the field.
        field: String,
        /// The decoder's message.
        #[source]
        source: serde_json::Error,
    },
    /// Fields that the v1alpha1 type does not have ([`Decoding::Strict`](super::Decoding::Strict)).
    #[error("strict decoding error: {}", .0.iter().map(|f| format!("unknown field {f:?}")).collect::<Vec<_>>().join(", "))]
    UnknownFields(Vec<String>),
    /// Values kube-proxy's validation refuses, or that kube-proxy-ipvs refuses.
    #[error("invalid configuration: {0}")]
    Invalid(FieldErrors),
    /// The effective configuration cannot be written (`--write-config-to`).
    #[error("cannot write the configuration to {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration cannot be encoded.
    #[error("cannot encode the configuration: {0}")]
    Encode(#[source] serde_saphyr::SerializeError),
}

impl Error {
    pub(super) fn invalid(errors: Vec<FieldError>) -> Self {
        Error::Invalid(FieldErrors(errors))
    }

    /// The line of the file a decoding error is at, when the decoder knows it.
    pub fn line(&self) -> Option<u64> {
        match self {
            Error::Decode { source, .. } => source.location().map(|l| l.line()),
            _ => None,
        }
    }

    /// The field errors, when that is what this is.
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            Error::Invalid(e) => &e.0,
            _ => &[],
        }
    }
}
