//! The warnings of loading a configuration: logged once at start, one line each. The text is
//! the log line's; tests tell them apart by variant and by the field, flag or gate named.

/// Something in the configuration that is accepted, but not as it says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Warning {
    /// A key given twice in one mapping: the last value is used, as kube-proxy's lenient
    /// decoder does.
    #[error(
        "key {key:?} given twice (line {line}): the last value is used (lenient decoding, as kube-proxy)"
    )]
    DuplicateKey {
        /// The key (`?` when the decoder did not say).
        key: String,
        /// The line of its second occurrence.
        line: usize,
    },
    /// A field the v1alpha1 type does not have, ignored (lenient decoding).
    #[error("unknown field {field:?} ignored (lenient decoding, as kube-proxy)")]
    UnknownField {
        /// Its path (`ipvs.fooBar`).
        field: String,
    },
    /// `mode` empty in a file: iptables mode to kube-proxy, ipvs mode here.
    #[error("mode: empty (kube-proxy would run iptables mode); kube-proxy-ipvs runs ipvs mode")]
    EmptyMode,
    /// A flag given with `--config` overrides the file's field (kube-proxy ignores the flag).
    #[error(
        "--{flag} overrides {field} from the config file (kube-proxy would ignore the flag when --config is given)"
    )]
    FlagOverridesFile {
        /// The flag, without `--`.
        flag: String,
        /// The field's path in the file.
        field: &'static str,
    },
    /// A field set to other than its default that kube-proxy-ipvs does not act on.
    #[error("{field} = {value} is accepted but not acted on by kube-proxy-ipvs: {note}")]
    Ignored {
        /// The field's path.
        field: &'static str,
        /// Its value, as JSON.
        value: String,
        /// Why it is not acted on.
        note: &'static str,
    },
    /// A feature gate kube-proxy knows that changes nothing here.
    #[error("featureGates.{gate} = {value} is accepted but not acted on by kube-proxy-ipvs")]
    GateIgnored {
        /// The gate.
        gate: String,
        /// Its value.
        value: bool,
    },
    /// `nodePortAddresses: [localhost]`.
    #[error(
        "nodePortAddresses: \"localhost\" is ignored: IPVS mode never serves NodePorts on loopback"
    )]
    LocalhostNodePorts,
}
