//! The errors of loading a configuration: each wrong field named by its path.

use std::fmt;
use std::path::PathBuf;

use super::GoDuration;
use super::gates::GateError;
use super::interface::NameError;
use crate::logging::vmodule::EntryError;
use crate::model::snapshot::config::BadVipBinding;

/// One field that is wrong, named by its path in the file (`ipvs.syncPeriod`) or its flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `ipvs.excludeCIDRs[1]`, or `--flag`.
    pub field: String,
    /// What is wrong with it.
    pub message: Problem,
}

/// What is wrong with a field, one variant per kind of mistake with the values it names. The
/// text is the error log's.
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
    /// `apiVersion` or `kind` not the one kube-proxy's validation wants.
    #[error("must be {expected}")]
    MustBe {
        /// The value it must have.
        expected: &'static str,
    },
    /// `apiVersion` or `kind` that the decoder does not take.
    #[error("{value:?} is not supported: must be {expected}")]
    Unsupported {
        /// The value in the file.
        value: String,
        /// The value it must have.
        expected: &'static str,
    },
    /// A number outside its range (the number is not shown where the check does not have it).
    #[error("{}must be within the range [{min}, {max}]", shown(got))]
    OutOfRange {
        /// The number, when shown.
        got: Option<i64>,
        /// The least allowed.
        min: i64,
        /// The most allowed.
        max: i64,
    },
    /// A count or a duration below 0.
    #[error("{}must be greater than or equal to 0", shown(got))]
    Negative {
        /// The value, when shown.
        got: Option<Number>,
    },
    /// A period that must be above 0.
    #[error("{got}: must be greater than 0")]
    NotPositive {
        /// The period.
        got: GoDuration,
    },
    /// A minimum above the period it bounds (`minSyncPeriod` above `syncPeriod`).
    #[error("{got}: must be less than or equal to {limit_field} ({limit})")]
    AboveLimit {
        /// The minimum.
        got: GoDuration,
        /// The field it must not exceed.
        limit_field: String,
        /// That field's value.
        limit: GoDuration,
    },
    /// `mode` that kube-proxy does not know.
    #[error(
        "{mode:?}: must be iptables, ipvs, nftables or blank (blank means the best-available proxy)"
    )]
    UnknownMode {
        /// The mode.
        mode: String,
    },
    /// `detectLocalMode` that kube-proxy does not know.
    #[error(
        "{mode:?}: supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\""
    )]
    UnknownDetectLocalMode {
        /// The mode.
        mode: String,
    },
    /// A log format other than text or json.
    #[error("{format:?}: must be text or json")]
    UnknownLogFormat {
        /// The format.
        format: String,
    },
    /// An `ipvs.allowedSchedulers` entry that IPVS would not load under its lock.
    #[error(
        "{scheduler:?}: only the schedulers IPVS would load under its lock need allowing ({})",
        crate::model::desired::scheduler::LOADED_UNDER_LOCK.join(", ")
    )]
    NotLoadedUnderLock {
        /// The scheduler.
        scheduler: String,
    },
    /// `ipvs.scheduler` with characters no scheduler module's name has.
    #[error("{name:?} is not an IPVS scheduler name")]
    NotASchedulerName {
        /// The name.
        name: String,
    },
    /// Not an IP address.
    #[error("{value:?}: must be a valid IP address")]
    NotAnIp {
        /// The value.
        value: String,
    },
    /// Not `IP:port`.
    #[error("{value:?}: must be IP:port")]
    NotHostPort {
        /// The value.
        value: String,
    },
    /// `IP:port` with port 0.
    #[error("{value:?}: must be a valid port (1-65535)")]
    PortZero {
        /// The value.
        value: String,
    },
    /// Not a CIDR (a bare address is not one).
    #[error("{value:?} is not a valid CIDR (e.g. 10.0.0.0/8)")]
    NotACidr {
        /// The value.
        value: String,
    },
    /// A `nodePortAddresses` entry that is neither a CIDR nor a keyword.
    #[error("{value:?} is not a valid CIDR (e.g. 10.0.0.0/8) (nor primary, all or localhost)")]
    NotANodePortAddress {
        /// The entry.
        value: String,
    },
    /// `primary` in `nodePortAddresses` next to other entries.
    #[error("\"primary\" cannot be combined with CIDRs")]
    PrimaryNotAlone,
    /// Two `clusterCIDR`s of the same family.
    #[error("{value:?}: must be a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)")]
    NotDualStack {
        /// The whole `clusterCIDR`.
        value: String,
    },
    /// More than two `clusterCIDR`s.
    #[error(
        "{value:?}: only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)"
    )]
    TooManyCidrs {
        /// The whole `clusterCIDR`.
        value: String,
    },
    /// Not a port range (`low-high` or `base+size`).
    #[error("{value:?}: must be a valid port range (e.g. 300-2000)")]
    NotAPortRange {
        /// The value.
        value: String,
    },
    /// `showHiddenMetricsForVersion` not `<major>.<minor>`.
    #[error("{value:?}: must be <major>.<minor>, e.g. 1.33")]
    NotAVersion {
        /// The value.
        value: String,
    },
    /// An interface name (or prefix) left empty where `detectLocalMode` needs it.
    #[error("must not be empty when detectLocalMode is {mode}")]
    EmptyForMode {
        /// The `detectLocalMode` that needs it.
        mode: &'static str,
    },
    /// `hostnameOverride` of white space only.
    #[error("must not be only white space")]
    OnlyWhiteSpace,
    /// A `logging.vmodule` file pattern that is empty or has `,` or `=`.
    #[error("{pattern:?}: must be a non-empty pattern without , or =")]
    BadFilePattern {
        /// The pattern.
        pattern: String,
    },
    /// A flag value that does not parse as its kind.
    #[error("{value:?} is not {expected}")]
    NotA {
        /// The value.
        value: String,
        /// What it should have been.
        expected: Expected,
    },
    /// A duration that Go's `time.ParseDuration` would refuse, in its words.
    #[error("{0}")]
    Duration(String),
    /// `--hostname-override` of white space only.
    #[error("empty hostname-override is invalid")]
    EmptyHostnameOverride,
    /// A timeout below 0 that the model's configuration cannot take.
    #[error("{got} must not be negative")]
    NegativeTimeout {
        /// The timeout.
        got: GoDuration,
    },
    /// A `--vmodule` entry that is not `pattern=N`.
    #[error(transparent)]
    VModule(#[from] EntryError),
    /// `ipvs.vipBinding` neither `address` nor `route`.
    #[error(transparent)]
    VipBinding(#[from] BadVipBinding),
}

/// What a flag value should have been ([`Problem::NotA`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// A float (`--kube-api-qps`).
    Number,
    /// A 32-bit integer.
    Integer,
    /// Go's `strconv.ParseBool`.
    Boolean,
    /// A port, 0 to 65535.
    Port,
    /// A klog verbosity.
    VerbosityLevel,
    /// A resource quantity.
    Quantity,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expected::Number => "a number",
            Expected::Integer => "an integer",
            Expected::Boolean => "a boolean",
            Expected::Port => "a port",
            Expected::VerbosityLevel => "a verbosity level",
            Expected::Quantity => "a quantity (512, 1K, 2Ki, 3M, ...)",
        })
    }
}

/// A number a [`Problem`] names, shown as the file writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// A count.
    Int(i64),
    /// A duration.
    Duration(GoDuration),
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Int(n) => write!(f, "{n}"),
            Number::Duration(d) => write!(f, "{d}"),
        }
    }
}

/// `"{value}: "`, or nothing when the value is not shown.
fn shown<T: fmt::Display>(value: &Option<T>) -> String {
    value.as_ref().map(|v| format!("{v}: ")).unwrap_or_default()
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
