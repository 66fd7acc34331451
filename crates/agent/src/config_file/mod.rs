//! kube-proxy's configuration file (`--config`): a `KubeProxyConfiguration` of
//! `kubeproxy.config.k8s.io/v1alpha1`, in YAML or JSON.
//!
//! The pipeline is the one kube-proxy runs, step by step, each a pure function:
//! 1. [`KubeProxyConfiguration::from_text`] decodes every field of the v1alpha1 type. Unknown
//!    fields are named with their path (`ipvs.fooBar`). kube-proxy first decodes strictly and,
//!    when that fails only on unknown or duplicate fields, decodes again leniently and logs a
//!    warning; [`Decoding::Lenient`] does the same, [`Decoding::Strict`] refuses the file.
//! 2. [`KubeProxyConfiguration::apply_defaults`]: v1alpha1's defaults and the Linux platform
//!    defaults (`mode`, `detectLocalMode`), with IPVS mode as the default mode.
//! 3. [`KubeProxyConfiguration::apply_flags`]: flags given on the command line override the
//!    file (see [`flags`] for why this differs from kube-proxy).
//! 4. [`KubeProxyConfiguration::validate`]: kube-proxy's validation, every error naming the
//!    field by its path in the file.
//! 5. [`KubeProxyConfiguration::classify`]: what kube-proxy-ipvs acts on ([`FIELDS`]): values
//!    it refuses are errors, values it accepts but ignores are warnings to log.
//!
//! [`load`] runs them all. [`KubeProxyConfiguration::to_yaml`] writes the effective
//! configuration back (`--write-config-to`), [`KubeProxyConfiguration::to_proxy_config`]
//! builds the model's [`ProxyConfig`](crate::model::snapshot::config::ProxyConfig).
//!
//! # Layout
//! - `types`: the v1alpha1 `KubeProxyConfiguration` type, every field of it.
//! - `codec`: the file's text into the type, and the effective configuration back to text.
//! - `defaults`: v1alpha1's defaulting and the platform defaults.
//! - [`flags`]: command-line flags over the file.
//! - `validate`: kube-proxy's validation; `error`: its errors, each naming the field's path.
//! - `fields`: what kube-proxy-ipvs does with each field ([`FIELDS`]).
//! - `effective`: what the rest of the agent reads from a loaded configuration.
//! - [`duration`]: Go's `time.Duration` text form; [`gates`]: the feature gates;
//!   [`interface`]: interface names; `oom`: the process's `oomScoreAdj`.
//! - `tests`: the pipeline, step by step, against files.

pub mod duration;
pub mod flags;

mod codec;
mod defaults;
mod effective;
mod error;
mod fields;
pub mod gates;
pub mod interface;
mod oom;
mod types;
mod validate;
mod warning;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use codec::Decoding;
pub use duration::{GoDuration, TimeOrDuration};
pub use error::{Error, Expected, FieldError, FieldErrors, Number, Problem};
pub use fields::{FIELDS, Field, Support};
pub use flags::FlagOverrides;
pub use oom::write_oom_score_adj;
pub use types::{
    ClientConnection, Conntrack, DetectLocal, IpTables, Ipvs, KubeProxyConfiguration, Logging,
    LoggingOptions, NfTables, OutputRouting, VModule, Winkernel,
};
pub use validate::{parse_cidr, parse_host_port};
pub use warning::Warning;

use defaults::append_port;

/// The only `apiVersion` kube-proxy reads.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// The `kind`.
pub const KIND: &str = "KubeProxyConfiguration";
/// kube-proxy's healthz port (`ports.ProxyHealthzPort`).
pub const HEALTHZ_PORT: u16 = 10256;
/// kube-proxy's metrics port (`ports.ProxyStatusPort`).
pub const METRICS_PORT: u16 = 10249;
/// The feature gate that, set to false, turns IPVS mode off (Kubernetes 1.37 and later).
pub const IPVS_GATE: &str = "KubeProxyIPVS";

/// A configuration ready to run, with the warnings to log.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The effective configuration: file, defaults, flags.
    pub config: KubeProxyConfiguration,
    /// Warnings to log once at start (unknown fields, ignored fields, flags overriding the
    /// file).
    pub warnings: Vec<Warning>,
}

/// Reads `file` (when given), applies the defaults and the explicit `flags`, validates and
/// classifies: everything `--config` needs. Without a file the flags alone are used, over the
/// defaults.
pub fn load(
    file: Option<&Path>,
    flags: &FlagOverrides,
    decoding: Decoding,
) -> Result<Loaded, Error> {
    let (mut config, mut warnings) = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.to_path_buf(),
                source,
            })?;
            KubeProxyConfiguration::from_text(&text, decoding)?
        }
        None => (KubeProxyConfiguration::empty(), Vec::new()),
    };
    if config.mode.is_empty() && file.is_some() && flags.get("proxy-mode").is_none() {
        warnings.push(Warning::EmptyMode);
    }
    config.apply_defaults();
    warnings.extend(config.apply_flags(flags, file.is_some())?);
    config.normalize_bind_addresses();
    config.validate()?;
    warnings.extend(config.classify()?);
    Ok(Loaded { config, warnings })
}
