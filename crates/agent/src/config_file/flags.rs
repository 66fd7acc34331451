//! Command-line flags over the configuration file.
//!
//! kube-proxy ignores almost every flag when `--config` is given: it replaces its whole
//! configuration with the file's and keeps only `--hostname-override` and the logging flags
//! (`-v`, `--logging-format`, `--vmodule`). We instead let every flag given explicitly on the
//! command line override the file's value, the rule kubelet follows, and log a warning naming
//! the flag and the field, saying that kube-proxy would have ignored it. The reasons: a flag
//! someone typed is a flag they meant, and silently dropping it is the surprise kube-proxy's
//! own help text has to warn about on each flag; the warning keeps a migrated DaemonSet whose
//! flags contradict its ConfigMap visible rather than silently different. Flags left at their
//! defaults never override the file; [`FlagOverrides::from_matches`] tells the two apart with
//! clap's value source.

use std::collections::BTreeMap;

use clap::parser::ValueSource;

use super::gates::GateError;
use super::{
    Error, Expected, FIELDS, FieldError, GoDuration, KubeProxyConfiguration, Problem,
    TimeOrDuration, VModule, Warning, append_port,
};

/// The kube-proxy flags given explicitly, by long name (`ipvs-sync-period`), each with its
/// raw values in order (list flags split at commas, as pflag's string slices).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagOverrides {
    values: BTreeMap<String, Vec<String>>,
}

/// Flags that kube-proxy still honours when `--config` is given: the node name and every
/// logging flag (component-base copies those over the file's `logging`).
const HONOURED_WITH_CONFIG: &[&str] = &[
    "hostname-override",
    "v",
    "logging-format",
    "vmodule",
    "log-flush-frequency",
    "log-text-split-stream",
    "log-text-info-buffer-size",
    "log-json-split-stream",
    "log-json-info-buffer-size",
];

impl FlagOverrides {
    /// No flags.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `--flag value` (repeatable; list flags split at commas).
    pub fn with(mut self, flag: &str, value: &str) -> Self {
        self.values
            .entry(flag.to_string())
            .or_default()
            .push(value.to_string());
        self
    }

    /// The flags that `matches` got from the command line (or the environment), not from
    /// defaults. `command` is the one that produced `matches` (`Args::command()`), used for
    /// the flags' long names; works whatever flags `Args` defines.
    pub fn from_matches(command: &clap::Command, matches: &clap::ArgMatches) -> Self {
        let mut out = Self::default();
        for arg in command.get_arguments() {
            let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
                continue;
            };
            if !matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            ) {
                continue;
            }
            let values: Vec<String> = match matches.try_get_raw(id) {
                Ok(Some(raw)) => raw.map(|v| v.to_string_lossy().into_owned()).collect(),
                // A flag without a value (`ArgAction::SetTrue` stores one; this is a count).
                _ => vec!["true".into()],
            };
            out.values.insert(long.to_string(), values);
        }
        out
    }

    /// The values of `flag`, if it was given.
    pub fn get(&self, flag: &str) -> Option<&[String]> {
        self.values.get(flag).map(Vec::as_slice)
    }

    /// True when no flag was given.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl KubeProxyConfiguration {
    /// Applies the explicit `flags` over this (defaulted) configuration. Returns a warning for
    /// every flag that overrides a value read from a file (`from_file`) which kube-proxy would
    /// have ignored. Flags that are not kube-proxy's (`--manifests`, `--config`, ...) are
    /// skipped. A bad value is an error naming the flag.
    pub fn apply_flags(
        &mut self,
        flags: &FlagOverrides,
        from_file: bool,
    ) -> Result<Vec<Warning>, Error> {
        let mut warnings = Vec::new();
        let mut errs = Vec::new();
        for (flag, values) in &flags.values {
            let last = values.last().map(String::as_str).unwrap_or("");
            let list = || -> Vec<String> {
                values
                    .iter()
                    .flat_map(|v| v.split(','))
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            };
            let result = self.apply_flag(flag, last, list);
            match result {
                Ok(false) => continue,
                Ok(true) => {}
                Err(message) => {
                    errs.push(FieldError::new(format!("--{flag}"), message));
                    continue;
                }
            }
            if from_file && !HONOURED_WITH_CONFIG.contains(&flag.as_str()) {
                let path = FIELDS
                    .iter()
                    .find(|f| f.flag == Some(flag.as_str()))
                    .map(|f| f.path)
                    .unwrap_or(match flag.as_str() {
                        "healthz-port" => "healthzBindAddress",
                        "metrics-port" => "metricsBindAddress",
                        _ => "?",
                    });
                warnings.push(Warning::FlagOverridesFile {
                    flag: flag.clone(),
                    field: path,
                });
            }
        }
        if errs.is_empty() {
            Ok(warnings)
        } else {
            Err(Error::invalid(errs))
        }
    }

    /// Applies one flag; `Ok(false)` when it is not a kube-proxy configuration flag.
    fn apply_flag(
        &mut self,
        flag: &str,
        v: &str,
        list: impl Fn() -> Vec<String>,
    ) -> Result<bool, Problem> {
        // Each group answers `Ok(false)` for a flag not its own; no flag is in two groups.
        Ok(self.apply_node_flag(flag, v, &list)?
            || self.apply_ipvs_flag(flag, v, &list)?
            || self.apply_iptables_flag(flag, v)?
            || self.apply_server_flag(flag, v)?
            || self.apply_client_flag(flag, v)?
            || self.apply_conntrack_flag(flag, v)?
            || self.apply_logging_flag(flag, v, &list)?)
    }

    /// The mode, the node's name and addresses, how local traffic is told, feature gates.
    fn apply_node_flag(
        &mut self,
        flag: &str,
        v: &str,
        list: &impl Fn() -> Vec<String>,
    ) -> Result<bool, Problem> {
        match flag {
            "proxy-mode" => self.mode = v.to_string(),
            "hostname-override" => {
                let name = v.trim();
                if name.is_empty() {
                    return Err(Problem::EmptyHostnameOverride);
                }
                self.hostname_override = name.to_lowercase();
            }
            "cluster-cidr" => self.cluster_cidr = list().join(","),
            "detect-local-mode" => self.detect_local_mode = v.to_string(),
            "pod-bridge-interface" => self.detect_local.bridge_interface = v.to_string(),
            "pod-interface-name-prefix" => self.detect_local.interface_name_prefix = v.to_string(),
            "nodeport-addresses" => self.node_port_addresses = list(),
            "config-sync-period" => self.config_sync_period = dur(v)?,
            "oom-score-adj" => self.oom_score_adj = Some(int(v)?),
            "feature-gates" => {
                for pair in list() {
                    let (k, b) = pair
                        .split_once('=')
                        .ok_or_else(|| GateError::Syntax { pair: pair.clone() })?;
                    let (gate, on) = (k.trim(), go_bool(b.trim())?);
                    super::gates::check(gate, on)?;
                    self.feature_gates.insert(gate.to_string(), on);
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `--ipvs-*` and `--vip-binding`.
    fn apply_ipvs_flag(
        &mut self,
        flag: &str,
        v: &str,
        list: &impl Fn() -> Vec<String>,
    ) -> Result<bool, Problem> {
        match flag {
            "ipvs-scheduler" => self.ipvs.scheduler = v.to_string(),
            "ipvs-sync-period" => self.ipvs.sync_period = dur(v)?,
            "ipvs-min-sync-period" => self.ipvs.min_sync_period = dur(v)?,
            "ipvs-exclude-cidrs" => self.ipvs.exclude_cidrs = list(),
            "ipvs-strict-arp" => self.ipvs.strict_arp = go_bool(v)?,
            "ipvs-tcp-timeout" => self.ipvs.tcp_timeout = dur(v)?,
            "ipvs-tcpfin-timeout" => self.ipvs.tcp_fin_timeout = dur(v)?,
            "ipvs-udp-timeout" => self.ipvs.udp_timeout = dur(v)?,
            "ipvs-graceful-termination-timeout" => {
                self.ipvs.graceful_termination_timeout = Some(dur(v)?)
            }
            "vip-binding" => {
                let mode: crate::model::snapshot::config::VipBinding = v.parse()?;
                self.ipvs.vip_binding = Some(mode.to_string());
            }
            "ipvs-allowed-schedulers" => self.ipvs.allowed_schedulers = list(),
            "ipvs-service-metrics" => self.ipvs.service_metrics = go_bool(v)?,
            "ipvs-scheduler-annotation" => self.ipvs.scheduler_annotation = Some(go_bool(v)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `--iptables-*` and `--masquerade-all`.
    fn apply_iptables_flag(&mut self, flag: &str, v: &str) -> Result<bool, Problem> {
        match flag {
            "masquerade-all" => self.iptables.masquerade_all = go_bool(v)?,
            "iptables-masquerade-bit" => self.iptables.masquerade_bit = Some(int(v)?),
            "iptables-sync-period" => self.iptables.sync_period = dur(v)?,
            "iptables-min-sync-period" => self.iptables.min_sync_period = dur(v)?,
            "iptables-localhost-nodeports" => {
                self.iptables.localhost_node_ports = Some(go_bool(v)?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The addresses the agent binds and serves on, and what its servers expose.
    fn apply_server_flag(&mut self, flag: &str, v: &str) -> Result<bool, Problem> {
        match flag {
            "bind-address" => self.bind_address = v.to_string(),
            "healthz-bind-address" => self.healthz_bind_address = v.to_string(),
            "metrics-bind-address" => self.metrics_bind_address = v.to_string(),
            "healthz-port" => set_port(&mut self.healthz_bind_address, v)?,
            "metrics-port" => set_port(&mut self.metrics_bind_address, v)?,
            "bind-address-hard-fail" => self.bind_address_hard_fail = go_bool(v)?,
            "profiling" => self.enable_profiling = go_bool(v)?,
            "show-hidden-metrics-for-version" => {
                self.show_hidden_metrics_for_version = v.to_string()
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `--kubeconfig` and `--kube-api-*`: the connection to the API server.
    fn apply_client_flag(&mut self, flag: &str, v: &str) -> Result<bool, Problem> {
        match flag {
            "kubeconfig" => self.client_connection.kubeconfig = v.to_string(),
            "kube-api-content-type" => self.client_connection.content_type = v.to_string(),
            "kube-api-qps" => {
                self.client_connection.qps = v.parse().map_err(|_| not_a(v, Expected::Number))?
            }
            "kube-api-burst" => self.client_connection.burst = int(v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `--conntrack-*`.
    fn apply_conntrack_flag(&mut self, flag: &str, v: &str) -> Result<bool, Problem> {
        match flag {
            "conntrack-max-per-core" => self.conntrack.max_per_core = Some(int(v)?),
            "conntrack-min" => self.conntrack.min = Some(int(v)?),
            "conntrack-tcp-timeout-established" => {
                self.conntrack.tcp_established_timeout = Some(dur(v)?)
            }
            "conntrack-tcp-timeout-close-wait" => {
                self.conntrack.tcp_close_wait_timeout = Some(dur(v)?)
            }
            "conntrack-tcp-be-liberal" => self.conntrack.tcp_be_liberal = go_bool(v)?,
            "conntrack-udp-timeout" => self.conntrack.udp_timeout = dur(v)?,
            "conntrack-udp-timeout-stream" => self.conntrack.udp_stream_timeout = dur(v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `-v`, `--logging-format`, `--vmodule` and `--log-*`.
    fn apply_logging_flag(
        &mut self,
        flag: &str,
        v: &str,
        list: &impl Fn() -> Vec<String>,
    ) -> Result<bool, Problem> {
        match flag {
            "v" => {
                self.logging.verbosity =
                    v.parse().map_err(|_| not_a(v, Expected::VerbosityLevel))?
            }
            "logging-format" => {
                if !matches!(v, "text" | "json") {
                    return Err(Problem::UnknownLogFormat {
                        format: v.to_string(),
                    });
                }
                self.logging.format = v.to_string()
            }
            // The flag's entries come after the file's, so that they win (component-base
            // joins them the same way).
            "vmodule" => {
                let entries = crate::logging::vmodule::parse(&list().join(","))?;
                for (file_pattern, verbosity) in entries {
                    self.logging.vmodule.push(VModule {
                        file_pattern,
                        verbosity,
                    });
                }
            }
            "log-flush-frequency" => self.logging.flush_frequency = TimeOrDuration(dur(v)?),
            "log-text-split-stream" => self.logging.options.text.split_stream = go_bool(v)?,
            "log-json-split-stream" => self.logging.options.json.split_stream = go_bool(v)?,
            "log-text-info-buffer-size" => {
                self.logging.options.text.info_buffer_size = quantity(v)?
            }
            "log-json-info-buffer-size" => {
                self.logging.options.json.info_buffer_size = quantity(v)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A Go duration (`30s`, `1m30s`).
fn dur(v: &str) -> Result<GoDuration, Problem> {
    GoDuration::parse(v).map_err(Problem::Duration)
}

/// `v` is not the `expected` kind of value.
fn not_a(v: &str, expected: Expected) -> Problem {
    Problem::NotA {
        value: v.to_string(),
        expected,
    }
}

/// A 32-bit integer.
fn int(v: &str) -> Result<i32, Problem> {
    v.parse::<i32>().map_err(|_| not_a(v, Expected::Integer))
}

/// A resource quantity as `resource.ParseQuantity` takes it: a decimal number and an optional
/// suffix (`512`, `1K`, `2Ki`, `1.5M`, `3e3`).
pub fn quantity(v: &str) -> Result<String, Problem> {
    const SUFFIXES: &[&str] = &[
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E", "",
    ];
    let number = |n: &str| {
        n.starts_with(|c: char| c.is_ascii_digit() || c == '.')
            && n.parse::<f64>().is_ok_and(|x| x >= 0.0)
    };
    let ok = SUFFIXES.iter().any(|suffix| {
        v.strip_suffix(suffix)
            .is_some_and(|n| number(n) && !n.ends_with(['e', 'E']))
    });
    if ok {
        Ok(v.to_string())
    } else {
        Err(not_a(v, Expected::Quantity))
    }
}

/// Go's `strconv.ParseBool`.
pub fn go_bool(v: &str) -> Result<bool, Problem> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(not_a(v, Expected::Boolean)),
    }
}

/// The deprecated `--healthz-port`/`--metrics-port`: 0 disables the server, another port
/// replaces the address's port.
fn set_port(addr: &mut String, v: &str) -> Result<(), Problem> {
    let port: u16 = v.parse().map_err(|_| not_a(v, Expected::Port))?;
    if port == 0 {
        addr.clear();
        return Ok(());
    }
    let host = match addr.parse::<std::net::SocketAddr>() {
        Ok(a) => a.ip().to_string(),
        Err(_) => "0.0.0.0".to_string(),
    };
    *addr = host;
    append_port(addr, port);
    Ok(())
}
