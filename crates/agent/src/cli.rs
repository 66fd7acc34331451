//! The command line, with kube-proxy's flag names and meanings.
//!
//! kube-proxy's own flags are kept as the strings the user typed: the configuration module
//! (`config_file`) owns their defaults, their validation and the way they combine with a
//! `--config` file, so that a flag and the field it stands for can never disagree.
//!
//! Every flag of kube-proxy 1.37's `--help` is accepted, with pflag's syntax (`--flag=value`,
//! `--flag value`, a bool as `--flag` or `--flag=false`, `-v=2`, `--v=2`): the flags of
//! [`Args`], and the logging and other flags of [`TABLE`], which are generated from it rather
//! than written out as fields. A flag the agent does not act on is warned about once, with
//! the reason, by the configuration's check ([`config_file::FIELDS`]);
//! `tests/check-flags.sh` runs each flag of the real kube-proxy's `--help`.

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use crate::config_file::{self, Decoding, FlagOverrides, KubeProxyConfiguration};
use crate::model::snapshot::config::ProxyConfig;

/// kube-proxy-ipvs: a Kubernetes Service proxy on Linux IPVS, a drop-in for
/// `kube-proxy --proxy-mode=ipvs`. Flags take kube-proxy's names and meanings.
#[derive(Debug, Parser)]
#[command(
    name = "kube-proxy-ipvs",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Args {
    /// A KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) file. Flags given
    /// explicitly override its fields, each with a warning.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Write the effective configuration (the file, the flags and the defaults, as a
    /// KubeProxyConfiguration) to this file and exit.
    #[arg(long)]
    pub write_config_to: Option<PathBuf>,
    /// A file or directory of YAML manifests (Services, EndpointSlices, Nodes) used instead of
    /// an API server; changes to it are applied.
    #[arg(long)]
    pub manifests: Option<PathBuf>,
    /// The API server's address, overriding the kubeconfig's; without a kubeconfig, this
    /// address alone, with no credentials (as kube-proxy).
    #[arg(long)]
    pub master: Option<String>,
    /// List the initial state from the API server in pages of this many objects, each page a
    /// consistent read (0, the default: the API server streams the initial state as watch
    /// events, or, when it cannot stream, one unpaged list served from its watch cache).
    #[arg(long, default_value_t = 0)]
    pub api_list_page_size: u32,
    /// Run one full sync, then exit (0 on success).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub once: bool,
    /// Print the plan and the iptables-restore input without touching the kernel.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub dry_run: bool,
    /// Remove everything the agent owns, and nothing else, then exit.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub cleanup: bool,
    /// Only set up the host (the sysctls the agent wants, the IPVS timeouts, the conntrack
    /// limits) and exit: for a privileged init container, so that the agent itself needs no
    /// writable /proc/sys.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub init_only: bool,
    /// How long a removed TCP real server may drain at weight 0 before it is deleted even
    /// with connections left (kube-proxy has no bound); 0s deletes at once. Default 15m; in
    /// the config file, `ipvs.gracefulTerminationTimeout`.
    #[arg(long, value_parser = parse_duration)]
    pub ipvs_graceful_termination_timeout: Option<std::time::Duration>,
    /// How the VIPs are made local: `address` (kube-proxy's way: one address per VIP on
    /// kube-ipvs0) or `route` (one `local` route per IPv4 VIP in table local with kube-ipvs0
    /// as its device; much faster with tens of thousands of VIPs). Default `address`; in the
    /// config file, `ipvs.vipBinding`.
    #[arg(long)]
    pub vip_binding: Option<String>,

    /// Schedulers (lblc, lblcr) that a Service's scheduler annotation may name even when
    /// their kernel module is not loaded: IPVS then loads it under its lock, which can hang
    /// IPVS and every network namespace teardown on the node. Without it such a Service gets
    /// --ipvs-scheduler, with a warning event; a module loaded when the agent starts is
    /// allowed anyway. In the config file, `ipvs.allowedSchedulers`.
    #[arg(long)]
    pub ipvs_allowed_schedulers: Option<String>,
    /// Export IPVS's counters per virtual server (`kube_proxy_ipvs_service_*`: connections,
    /// packets and bytes in and out, one series per virtual server, so off by default). In
    /// the config file, `ipvs.serviceMetrics`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub ipvs_service_metrics: Option<String>,
    /// Read a Service's own scheduler from its annotation (`kube-proxy-ipvs.io/scheduler`,
    /// or kube-router's); `false` gives every Service --ipvs-scheduler, as kube-proxy does,
    /// and so no Service's annotation can cost the node a warning event. Default true; in the
    /// config file, `ipvs.schedulerAnnotation`.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub ipvs_scheduler_annotation: Option<String>,

    /// Which proxy mode to use; only `ipvs` is implemented.
    #[arg(long)]
    pub proxy_mode: Option<String>,
    /// The node's name; an endpoint is local when its nodeName equals it. Defaults to the
    /// host name.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The IPVS scheduler (rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, ...).
    #[arg(long)]
    pub ipvs_scheduler: Option<String>,
    /// How often the kernel is read again and repaired (default 30s).
    #[arg(long)]
    pub ipvs_sync_period: Option<String>,
    /// The minimum time between two syncs (default 0s).
    #[arg(long)]
    pub ipvs_min_sync_period: Option<String>,
    /// Comma-separated CIDRs whose IPVS virtual servers are never deleted.
    #[arg(long)]
    pub ipvs_exclude_cidrs: Option<String>,
    /// Set arp_ignore=1 and arp_announce=2 (MetalLB L2 mode needs it).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub ipvs_strict_arp: Option<String>,
    /// IPVS TCP timeout (0 leaves it as is).
    #[arg(long)]
    pub ipvs_tcp_timeout: Option<String>,
    /// IPVS TCP FIN timeout (0 leaves it as is).
    #[arg(long)]
    pub ipvs_tcpfin_timeout: Option<String>,
    /// IPVS UDP timeout (0 leaves it as is).
    #[arg(long)]
    pub ipvs_udp_timeout: Option<String>,
    /// SNAT all traffic sent to cluster IPs.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub masquerade_all: Option<String>,
    /// The fwmark bit that marks packets for SNAT (0..31, default 14).
    #[arg(long)]
    pub iptables_masquerade_bit: Option<String>,
    /// iptables mode only: accepted and ignored, with a warning.
    #[arg(long)]
    pub iptables_sync_period: Option<String>,
    /// iptables mode only: accepted and ignored, with a warning.
    #[arg(long)]
    pub iptables_min_sync_period: Option<String>,
    /// iptables mode only: accepted and ignored, with a warning.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub iptables_localhost_nodeports: Option<String>,
    /// The pod CIDRs of the cluster (comma-separated, one per family).
    #[arg(long)]
    pub cluster_cidr: Option<String>,
    /// How pod traffic is recognised: ClusterCIDR, NodeCIDR, BridgeInterface,
    /// InterfaceNamePrefix.
    #[arg(long)]
    pub detect_local_mode: Option<String>,
    /// The pods' bridge (BridgeInterface mode).
    #[arg(long)]
    pub pod_bridge_interface: Option<String>,
    /// The pods' interface name prefix (InterfaceNamePrefix mode).
    #[arg(long)]
    pub pod_interface_name_prefix: Option<String>,
    /// Comma-separated CIDRs of the node addresses NodePorts are served on, or `primary`.
    /// Empty: every local address.
    #[arg(long)]
    pub nodeport_addresses: Option<String>,
    /// The node's primary address override.
    #[arg(long)]
    pub bind_address: Option<String>,
    /// Where `/healthz`, `/livez` and `/readyz` are served (default 0.0.0.0:10256; empty
    /// disables).
    #[arg(long)]
    pub healthz_bind_address: Option<String>,
    /// Where `/metrics` is served (default 127.0.0.1:10249; empty disables).
    #[arg(long)]
    pub metrics_bind_address: Option<String>,
    /// Deprecated: the healthz port (0 disables).
    #[arg(long)]
    pub healthz_port: Option<String>,
    /// Deprecated: the metrics port (0 disables).
    #[arg(long)]
    pub metrics_port: Option<String>,
    /// Fail when the healthz or metrics address cannot be bound.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub bind_address_hard_fail: Option<String>,
    /// Profiling handlers (accepted, not served).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub profiling: Option<String>,
    /// Accepted for compatibility.
    #[arg(long)]
    pub show_hidden_metrics_for_version: Option<String>,
    /// The kubeconfig file (default: in-cluster configuration).
    #[arg(long)]
    pub kubeconfig: Option<String>,
    /// The API content type (the client speaks JSON; accepted with a warning).
    #[arg(long)]
    pub kube_api_content_type: Option<String>,
    /// API requests per second (default 5).
    #[arg(long)]
    pub kube_api_qps: Option<String>,
    /// API request burst (default 10).
    #[arg(long)]
    pub kube_api_burst: Option<String>,
    /// conntrack entries per CPU (default 32768; 0 leaves it).
    #[arg(long)]
    pub conntrack_max_per_core: Option<String>,
    /// Minimum conntrack table size (default 131072).
    #[arg(long)]
    pub conntrack_min: Option<String>,
    /// Established TCP conntrack timeout (default 24h).
    #[arg(long)]
    pub conntrack_tcp_timeout_established: Option<String>,
    /// CLOSE_WAIT TCP conntrack timeout (default 1h).
    #[arg(long)]
    pub conntrack_tcp_timeout_close_wait: Option<String>,
    /// Make conntrack's TCP tracking liberal.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub conntrack_tcp_be_liberal: Option<String>,
    /// UDP conntrack timeout (0 leaves it).
    #[arg(long)]
    pub conntrack_udp_timeout: Option<String>,
    /// UDP stream conntrack timeout (0 leaves it).
    #[arg(long)]
    pub conntrack_udp_timeout_stream: Option<String>,
    /// Informer resync period (accepted; the watches are level-triggered).
    #[arg(long)]
    pub config_sync_period: Option<String>,
    /// The process's OOM score adjustment (default -999).
    #[arg(long)]
    pub oom_score_adj: Option<String>,
    /// Feature gates (`Name=true,...`).
    #[arg(long)]
    pub feature_gates: Option<String>,
    /// Log format (`text` or `json`).
    #[arg(long)]
    pub logging_format: Option<String>,
    /// Log verbosity (0..10), as kube-proxy's -v.
    #[arg(short = 'v', long = "v")]
    pub v: Option<String>,
}

/// The type of a flag's value, as kube-proxy's `--help` names it, and so how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--flag` or `--flag=true|false`.
    Bool,
    /// A Go duration (`5s`).
    Duration,
    /// A resource quantity (`0`, `64Ki`).
    Quantity,
    /// Any string (checked where it is used).
    Text,
    /// `--version`, `--version=raw`: optional value.
    Version,
}

/// A flag of kube-proxy's that is not a field of [`Args`]: generated from this table.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The long name, without `--`.
    pub name: &'static str,
    /// Its value's type.
    pub kind: Kind,
    /// The help line. What the agent does with the value is the configuration's business:
    /// each of these is a `logging` field, and [`config_file::FIELDS`] says whether it is
    /// used or, when set to anything but its default, warned about once with the reason.
    pub help: &'static str,
}

/// kube-proxy's flags beyond [`Args`]: component-base's logging flags and `--version`.
pub const TABLE: &[Flag] = &[
    Flag {
        name: "vmodule",
        kind: Kind::Text,
        help: "comma-separated pattern=N settings: a pattern naming one of the agent's modules \
               (sync, ipvs, api, ...) sets its verbosity; others are warned about",
    },
    Flag {
        name: "log-flush-frequency",
        kind: Kind::Duration,
        help: "logging.flushFrequency: accepted, not used (logs are not buffered)",
    },
    Flag {
        name: "log-text-split-stream",
        kind: Kind::Bool,
        help: "logging.options.text.splitStream: accepted, not used (all logs go to stderr)",
    },
    Flag {
        name: "log-text-info-buffer-size",
        kind: Kind::Quantity,
        help: "logging.options.text.infoBufferSize: accepted, not used (logs are not buffered)",
    },
    Flag {
        name: "log-json-split-stream",
        kind: Kind::Bool,
        help: "logging.options.json.splitStream: accepted, not used (all logs go to stderr)",
    },
    Flag {
        name: "log-json-info-buffer-size",
        kind: Kind::Quantity,
        help: "logging.options.json.infoBufferSize: accepted, not used (logs are not buffered)",
    },
    Flag {
        name: "version",
        kind: Kind::Version,
        help: "Print the version and exit (--version=raw: with the build's details)",
    },
];

impl Flag {
    /// The clap argument for this flag.
    fn arg(&self) -> clap::Arg {
        let arg = clap::Arg::new(self.name)
            .long(self.name)
            .help(self.help)
            .action(clap::ArgAction::Set);
        match self.kind {
            Kind::Bool => arg
                .num_args(0..=1)
                .default_missing_value("true")
                .value_parser(check_bool),
            Kind::Version => arg
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true"),
            Kind::Duration => arg.value_parser(check_duration),
            Kind::Quantity => arg.value_parser(check_quantity),
            Kind::Text => arg,
        }
    }
}

/// pflag's bool values (`--cleanup=false`), for the bool fields of [`Args`].
fn go_bool(v: &str) -> Result<bool, String> {
    config_file::flags::go_bool(v).map_err(|e| e.to_string())
}

fn check_bool(v: &str) -> Result<String, String> {
    config_file::flags::go_bool(v)
        .map(|_| v.to_string())
        .map_err(|e| e.to_string())
}

fn check_duration(v: &str) -> Result<String, String> {
    config_file::GoDuration::parse(v).map(|_| v.to_string())
}

fn check_quantity(v: &str) -> Result<String, String> {
    config_file::flags::quantity(v).map_err(|e| e.to_string())
}

/// The whole command line: [`Args`] and [`TABLE`]. Values that take exactly one argument
/// may start with `-` (`--oom-score-adj -999`), as pflag allows; a flag whose value is
/// optional never swallows the next flag.
pub fn command() -> clap::Command {
    Args::command()
        .args(TABLE.iter().map(Flag::arg))
        .mut_args(|a| {
            let one = a.get_action().takes_values()
                && a.get_num_args().is_none_or(|n| n.min_values() == 1);
            if one { a.allow_hyphen_values(true) } else { a }
        })
}

/// The parsed command line and the effective configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The agent's own flags (`--manifests`, `--once`...).
    pub args: std::sync::Arc<Args>,
    /// The effective kube-proxy configuration: file, defaults, flags.
    pub kube_proxy: KubeProxyConfiguration,
    /// The node's name.
    pub node_name: String,
    /// The model's configuration.
    pub proxy: ProxyConfig,
    /// Warnings to log once.
    pub warnings: Vec<config_file::Warning>,
}

/// Parses the process's command line (clap prints usage and exits 2 on a syntax error;
/// `--help` and `--version` print and exit 0).
pub fn parse() -> Result<Settings, config_file::Error> {
    settings(std::env::args_os())
}

/// Parses `argv` and builds the effective configuration.
pub fn settings<I, T>(argv: I) -> Result<Settings, config_file::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let command = command();
    let matches = command.clone().get_matches_from(argv);
    match matches.get_one::<String>("version").map(String::as_str) {
        None | Some("false") => {}
        Some(how) => {
            println!("{}", version(how == "raw"));
            std::process::exit(0);
        }
    }
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    from_matches(args, &command, &matches)
}

/// What `--version` prints: kube-proxy prints `Kubernetes v1.37.2`; this adds the commit
/// and its date (build.rs: the last commit of the crates, or what the image build passed), so
/// that two builds can be told apart; `raw` adds the flags' version and the platform.
fn version(raw: bool) -> String {
    let v = env!("CARGO_PKG_VERSION");
    let commit = env!("KUBE_PROXY_IPVS_GIT_COMMIT");
    let date = env!("KUBE_PROXY_IPVS_BUILD_DATE");
    if raw {
        format!(
            "kube-proxy-ipvs v{v} (commit {commit}, {date}; kube-proxy v1.37 flags; {} {})",
            std::env::consts::OS,
            std::env::consts::ARCH
        )
    } else {
        format!("kube-proxy-ipvs v{v} (commit {commit}, {date})")
    }
}

fn from_matches(
    args: Args,
    command: &clap::Command,
    matches: &clap::ArgMatches,
) -> Result<Settings, config_file::Error> {
    let flags = FlagOverrides::from_matches(command, matches);
    let loaded = config_file::load(args.config.as_deref(), &flags, Decoding::Lenient)?;
    let kube_proxy = loaded.config;
    let node_name = kube_proxy.node_name().unwrap_or_else(host_name);
    let mut proxy = kube_proxy.to_proxy_config(&node_name)?;
    // A module already loaded costs nothing more to use; read once, at start.
    proxy.allowed_schedulers.extend(
        crate::model::desired::scheduler::LOADED_UNDER_LOCK
            .iter()
            .filter(|s| crate::dataplane::modules::loaded(s))
            .map(|s| s.to_string()),
    );
    Ok(Settings {
        args: std::sync::Arc::new(args),
        kube_proxy,
        node_name,
        proxy,
        warnings: loaded.warnings,
    })
}

/// Parses a Go duration (`30s`, `1m30s`, `15m`, `0s`).
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = config_file::GoDuration::parse(s)?;
    if d.is_negative() {
        return Err(format!("{s}: must not be negative"));
    }
    Ok(d.to_std())
}

/// The host name, lower-cased as kube-proxy does.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_file::gates::GateError;
    use crate::config_file::{FieldError, Problem, Warning};
    use crate::model::snapshot::cluster::Family;

    #[test]
    fn the_version_names_the_build_it_is() {
        // Two builds of v0.1.0 must be told apart: both forms carry the commit and its date.
        for raw in [false, true] {
            let printed = version(raw);
            let head = format!("kube-proxy-ipvs v{} (commit ", env!("CARGO_PKG_VERSION"));
            assert!(printed.starts_with(&head), "{printed}");
            assert!(
                printed.contains(env!("KUBE_PROXY_IPVS_GIT_COMMIT")),
                "{printed}"
            );
            assert!(
                printed.contains(env!("KUBE_PROXY_IPVS_BUILD_DATE")),
                "{printed}"
            );
        }
    }

    /// Why a command line is refused: by clap (syntax, a value parser) or by the
    /// configuration.
    #[derive(Debug)]
    enum Refused {
        Clap(clap::Error),
        Config(config_file::Error),
    }

    impl Refused {
        /// The flags (`--flag`) or fields (`ipvs.scheduler`) it names.
        fn named(&self) -> Vec<String> {
            match self {
                Refused::Clap(e) => match e.get(clap::error::ContextKind::InvalidArg) {
                    // clap's `--flag <VALUE>`: the flag is the first word.
                    Some(clap::error::ContextValue::String(arg)) => {
                        arg.split(' ').take(1).map(str::to_string).collect()
                    }
                    _ => Vec::new(),
                },
                Refused::Config(e) => e.field_errors().iter().map(|f| f.field.clone()).collect(),
            }
        }

        /// The field errors, when the configuration refused it.
        fn field_errors(&self) -> &[FieldError] {
            match self {
                Refused::Config(e) => e.field_errors(),
                Refused::Clap(_) => &[],
            }
        }
    }

    fn try_settings(extra: &[&str]) -> Result<Settings, Refused> {
        let command = command();
        let mut argv = vec!["kube-proxy-ipvs", "--hostname-override", "Node-A"];
        argv.extend_from_slice(extra);
        let matches = command
            .clone()
            .try_get_matches_from(argv)
            .map_err(Refused::Clap)?;
        let args = Args::from_arg_matches(&matches).map_err(Refused::Clap)?;
        from_matches(args, &command, &matches).map_err(Refused::Config)
    }

    #[test]
    fn kube_proxy_flags_map_to_the_config() {
        let s = try_settings(&[
            "--ipvs-scheduler",
            "sh",
            "--masquerade-all",
            "--cluster-cidr",
            "10.244.0.0/16,fd00::/48",
            "--iptables-masquerade-bit",
            "13",
        ])
        .unwrap();
        assert_eq!(s.node_name, "node-a");
        assert_eq!(s.proxy.scheduler, "sh");
        assert!(s.proxy.masquerade_all);
        assert_eq!(s.proxy.masquerade_mark(), 0x2000);
        assert_eq!(s.proxy.families, vec![Family::V4, Family::V6]);
        let d = try_settings(&[]).unwrap();
        assert_eq!(d.proxy.scheduler, "rr");
        assert_eq!(
            d.proxy.vip_binding,
            crate::model::snapshot::config::VipBinding::Address
        );
        let r = try_settings(&["--vip-binding", "route"]).unwrap();
        assert_eq!(
            r.proxy.vip_binding,
            crate::model::snapshot::config::VipBinding::Route
        );
        assert_eq!(
            d.kube_proxy.sync_period(),
            std::time::Duration::from_secs(30)
        );
    }

    #[test]
    fn pflags_syntax_is_taken() {
        let cases: &[&[&str]] = &[
            &["-v=2"],
            &["-v", "2"],
            &["-v2"],
            &["--v=2"],
            &["--v", "2"],
            &["--oom-score-adj", "-999"],
            &["--cleanup=false"],
            &["--init-only=false"],
            &["--masquerade-all", "--v=2"],
            &["--masquerade-all=false"],
            &["--log-flush-frequency", "10s"],
            &["--vmodule", "sync=4"],
            &["--log-text-split-stream"],
            &["--log-json-split-stream=false"],
            &["--log-json-info-buffer-size=64Ki"],
            &["--log-text-info-buffer-size", "512"],
            &["--version=false"],
            &[
                "--feature-gates",
                "KubeProxyIPVS=true",
                "--feature-gates=AllBeta=false",
            ],
        ];
        for argv in cases {
            try_settings(argv).unwrap_or_else(|e| panic!("{argv:?}: {e:?}"));
        }
        let s = try_settings(&["--masquerade-all", "-v=3", "--oom-score-adj", "-999"]).unwrap();
        assert!(
            s.proxy.masquerade_all,
            "a bool flag does not swallow the next flag"
        );
        assert_eq!(s.kube_proxy.logging.verbosity, 3);
        assert_eq!(s.kube_proxy.oom_score_adj, Some(-999));
        assert!(!try_settings(&["--cleanup=false"]).unwrap().args.cleanup);
        assert!(try_settings(&["--cleanup"]).unwrap().args.cleanup);
        // pflag keeps the last of a repeated flag.
        let s = try_settings(&["--ipvs-scheduler", "sh", "--ipvs-scheduler", "lc"]).unwrap();
        assert_eq!(s.proxy.scheduler, "lc");
    }

    #[test]
    fn logging_flags_go_over_the_files_logging() {
        let file = std::env::temp_dir().join(format!("logging-{}.yaml", std::process::id()));
        std::fs::write(
            &file,
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nlogging:\n  format: json\n  verbosity: 4\n  vmodule: [{filePattern: api, verbosity: 2}]\n",
        )
        .unwrap();
        let p = file.to_str().unwrap();
        let from_file = try_settings(&["--config", p]).unwrap().kube_proxy.logging;
        let both = try_settings(&[
            "--config",
            p,
            "--logging-format=text",
            "-v=1",
            "--vmodule=sync=5",
        ])
        .unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            (from_file.format.as_str(), from_file.verbosity),
            ("json", 4)
        );
        let log = &both.kube_proxy.logging;
        assert_eq!((log.format.as_str(), log.verbosity), ("text", 1));
        let vmodule: Vec<(&str, u32)> = log
            .vmodule
            .iter()
            .map(|m| (m.file_pattern.as_str(), m.verbosity))
            .collect();
        assert_eq!(
            vmodule,
            [("api", 2), ("sync", 5)],
            "the flag's entries come last"
        );
        // kube-proxy honours its logging flags with --config: no "would ignore" warning.
        assert!(
            !both
                .warnings
                .iter()
                .any(|w| matches!(w, Warning::FlagOverridesFile { .. })),
            "{:?}",
            both.warnings
        );
    }

    #[test]
    fn flags_not_acted_on_are_warned_once_with_the_reason() {
        let s = try_settings(&[
            "--log-flush-frequency=10s",
            "--log-text-split-stream",
            "--profiling",
            "--iptables-sync-period=1m",
        ])
        .unwrap();
        for field in [
            "logging.flushFrequency",
            "logging.options.text.splitStream",
            "enableProfiling",
            "iptables.syncPeriod",
        ] {
            // The reason is the field table's note.
            let notes: Vec<&str> = s
                .warnings
                .iter()
                .filter_map(|w| match w {
                    Warning::Ignored { field: f, note, .. } if *f == field => Some(*note),
                    _ => None,
                })
                .collect();
            assert!(
                matches!(notes[..], [note] if !note.is_empty()),
                "{field}: {:?}",
                s.warnings
            );
        }
        // kube-proxy's defaults change nothing and say nothing.
        let quiet = try_settings(&["--log-flush-frequency=5s", "--profiling=false"]).unwrap();
        assert_eq!(quiet.warnings, []);
    }

    #[test]
    fn feature_gates_are_kube_proxys() {
        for ok in [
            "KubeProxyIPVS=true",
            "AllAlpha=true,AllBeta=false",
            "AllowServiceExternalIPs=true",
            "CPUManagerPolicyOptions=true",
        ] {
            let s =
                try_settings(&["--feature-gates", ok]).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
            assert!(!s.kube_proxy.feature_gates.is_empty());
        }
        let err = |v: &str| {
            try_settings(&["--feature-gates", v])
                .map(|_| ())
                .unwrap_err()
        };
        // Each refusal names the flag (or the field) and says why, as a value.
        let said = |v: &str| -> (String, Problem) {
            let e = err(v);
            match e.field_errors() {
                [one] => (one.field.clone(), one.message.clone()),
                _ => panic!("{v}: {e:?}"),
            }
        };
        let gate = |e: GateError| Problem::Gate(e);
        assert_eq!(
            said("NoSuchGate=true"),
            (
                "--feature-gates".into(),
                gate(GateError::Unknown {
                    gate: "NoSuchGate".into()
                })
            )
        );
        assert_eq!(
            said("CPUManagerPolicyOptions=false"),
            (
                "--feature-gates".into(),
                gate(GateError::Locked {
                    gate: "CPUManagerPolicyOptions".into(),
                    value: false
                })
            )
        );
        assert_eq!(
            said("KubeProxyIPVS=false"),
            ("featureGates.KubeProxyIPVS".into(), Problem::IpvsGateOff)
        );
        assert_eq!(
            said("KubeProxyIPVS"),
            (
                "--feature-gates".into(),
                gate(GateError::Syntax {
                    pair: "KubeProxyIPVS".into()
                })
            )
        );
    }

    #[test]
    fn bad_logging_values_are_named() {
        let named = |a: &[&str]| try_settings(a).map(|_| ()).unwrap_err().named();
        for (arg, flag) in [
            ("--log-flush-frequency=soon", "--log-flush-frequency"),
            (
                "--log-text-info-buffer-size=lots",
                "--log-text-info-buffer-size",
            ),
            ("--log-json-split-stream=maybe", "--log-json-split-stream"),
            ("--vmodule=sync", "--vmodule"),
            ("--v=x", "--v"),
            ("--logging-format=xml", "--logging-format"),
            ("--cleanup=maybe", "--cleanup"),
        ] {
            assert_eq!(named(&[arg]), [flag], "{arg}");
        }
    }

    #[test]
    fn allowed_schedulers_come_from_the_flag_and_the_file() {
        let s = try_settings(&["--ipvs-allowed-schedulers", "lblc,lblcr"]).unwrap();
        assert!(s.proxy.allowed_schedulers.contains("lblc"));
        assert!(s.proxy.allowed_schedulers.contains("lblcr"));
        let err = try_settings(&["--ipvs-allowed-schedulers", "rr"])
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.named(), ["ipvs.allowedSchedulers[0]"], "{err:?}");
        let file = std::env::temp_dir().join(format!("allowed-{}.yaml", std::process::id()));
        std::fs::write(
            &file,
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nipvs:\n  allowedSchedulers: [lblcr]\n",
        )
        .unwrap();
        let s = try_settings(&["--config", file.to_str().unwrap()]).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert!(s.proxy.allowed_schedulers.contains("lblcr"));
        assert_eq!(s.kube_proxy.ipvs.allowed_schedulers, ["lblcr"]);
    }

    #[test]
    fn bad_flags_are_named() {
        let named = |a: &[&str]| try_settings(a).map(|_| ()).unwrap_err().named();
        assert_eq!(named(&["--proxy-mode", "iptables"]), ["mode"]);
        assert_eq!(
            named(&["--iptables-masquerade-bit", "32"]),
            ["iptables.masqueradeBit"]
        );
        assert_eq!(named(&["--vip-binding", "loopback"]), ["--vip-binding"]);
        assert_eq!(
            named(&["--ipvs-exclude-cidrs", "10.0.0.1"]),
            ["ipvs.excludeCIDRs[0]"]
        );
        assert_eq!(
            named(&["--ipvs-min-sync-period", "1m", "--ipvs-sync-period", "30s"]),
            ["ipvs.minSyncPeriod"]
        );
    }

    #[test]
    fn a_config_file_is_read_and_flags_override_it() {
        let path = std::env::temp_dir().join(format!("kpi-cli-{}.yaml", std::process::id()));
        std::fs::write(
            &path,
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  scheduler: lc\n  syncPeriod: 45s\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let from_file = try_settings(&["--config", p]).unwrap();
        assert_eq!(from_file.proxy.scheduler, "lc");
        assert_eq!(
            from_file.kube_proxy.sync_period(),
            std::time::Duration::from_secs(45)
        );
        let overridden = try_settings(&["--config", p, "--ipvs-scheduler", "wrr"]).unwrap();
        assert_eq!(overridden.proxy.scheduler, "wrr");
        assert!(
            overridden.warnings.contains(&Warning::FlagOverridesFile {
                flag: "ipvs-scheduler".into(),
                field: "ipvs.scheduler"
            }),
            "{:?}",
            overridden.warnings
        );
        std::fs::remove_file(&path).unwrap();
    }
}
