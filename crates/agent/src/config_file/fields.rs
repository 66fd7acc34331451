//! What kube-proxy-ipvs does with each field ([`FIELDS`]), and the warnings and refusals that
//! follow from it ([`KubeProxyConfiguration::classify`]).

use super::{Error, FieldError, IPVS_GATE, KubeProxyConfiguration, Problem, Warning};

impl KubeProxyConfiguration {
    /// What kube-proxy-ipvs does with each field ([`FIELDS`]): an error for values it refuses,
    /// and a warning for every field it accepts but does not act on that differs from its
    /// default.
    pub fn classify(&self) -> Result<Vec<Warning>, Error> {
        let mut refused = Vec::new();
        if self.mode != "ipvs" && !self.mode.is_empty() {
            refused.push(FieldError::new(
                "mode",
                Problem::ModeNotServed {
                    mode: self.mode.clone(),
                },
            ));
        }
        // kube-proxy refuses a gate it does not know, or a value a gate is locked against.
        for (gate, on) in &self.feature_gates {
            if let Err(why) = super::gates::check(gate, *on) {
                refused.push(FieldError::new(format!("featureGates.{gate}"), why));
            }
        }
        if self.feature_gates.get(IPVS_GATE) == Some(&false) {
            refused.push(FieldError::new(
                format!("featureGates.{IPVS_GATE}"),
                Problem::IpvsGateOff,
            ));
        }
        if !refused.is_empty() {
            return Err(Error::invalid(refused));
        }
        let mut warnings = Vec::new();
        let here = serde_json::to_value(self).unwrap_or_default();
        let defaults = serde_json::to_value(Self::defaults()).unwrap_or_default();
        for field in FIELDS.iter().filter(|f| f.support == Support::Ignored) {
            let value = lookup(&here, field.path);
            if value != lookup(&defaults, field.path) {
                let shown = value.map_or_else(|| "null".into(), |v| v.to_string());
                warnings.push(Warning::Ignored {
                    field: field.path,
                    value: shown,
                    note: field.note,
                });
            }
        }
        for (gate, on) in &self.feature_gates {
            if gate != IPVS_GATE {
                warnings.push(Warning::GateIgnored {
                    gate: gate.clone(),
                    value: *on,
                });
            }
        }
        if self.node_port_addresses.iter().any(|a| a == "localhost") {
            warnings.push(Warning::LocalhostNodePorts);
        }
        Ok(warnings)
    }
}

fn lookup<'a>(value: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(value, |v, key| v.get(key))
}

/// What kube-proxy-ipvs does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Read and acted on.
    Used,
    /// Read and validated, but not acted on: a value other than the default is logged as a
    /// warning.
    Ignored,
    /// Used, and some values are refused (the note says which).
    Restricted,
}

/// One field of the v1alpha1 type: its path, its flag, and what kube-proxy-ipvs does with it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The path in the file.
    pub path: &'static str,
    /// kube-proxy's flag for it, if any.
    pub flag: Option<&'static str>,
    /// What kube-proxy-ipvs does with it.
    pub support: Support,
    /// Why, or which part of the agent uses it.
    pub note: &'static str,
}

const fn field(
    path: &'static str,
    flag: Option<&'static str>,
    support: Support,
    note: &'static str,
) -> Field {
    Field {
        path,
        flag,
        support,
        note,
    }
}

use Support::{Ignored, Restricted, Used};

/// Every field of `KubeProxyConfiguration` v1alpha1 (leaves; maps as a whole).
pub const FIELDS: &[Field] = &[
    field(
        "apiVersion",
        None,
        Restricted,
        "must be kubeproxy.config.k8s.io/v1alpha1",
    ),
    field("kind", None, Restricted, "must be KubeProxyConfiguration"),
    field(
        "mode",
        Some("proxy-mode"),
        Restricted,
        "ipvs or empty (taken as ipvs); iptables, nftables and kernelspace are refused",
    ),
    field(
        "featureGates",
        Some("feature-gates"),
        Restricted,
        "gates kube-proxy 1.37 does not know, and KubeProxyIPVS=false, are refused; the others are logged and ignored",
    ),
    field(
        "hostnameOverride",
        Some("hostname-override"),
        Used,
        "the node name, trimmed and lower-cased",
    ),
    field(
        "bindAddress",
        Some("bind-address"),
        Ignored,
        "only picks the family of the default healthz/metrics addresses; the primary-node-IP override is not implemented",
    ),
    field(
        "healthzBindAddress",
        Some("healthz-bind-address"),
        Used,
        "/healthz and /livez (health module)",
    ),
    field(
        "metricsBindAddress",
        Some("metrics-bind-address"),
        Used,
        "/metrics (metrics module)",
    ),
    field(
        "bindAddressHardFail",
        Some("bind-address-hard-fail"),
        Used,
        "a failed healthz or metrics bind is fatal instead of retried every 5s",
    ),
    field(
        "enableProfiling",
        Some("profiling"),
        Ignored,
        "there is no Go pprof; use perf or tokio-console",
    ),
    field(
        "showHiddenMetricsForVersion",
        Some("show-hidden-metrics-for-version"),
        Ignored,
        "no metric is hidden",
    ),
    field(
        "clientConnection.kubeconfig",
        Some("kubeconfig"),
        Used,
        "the API client",
    ),
    field(
        "clientConnection.qps",
        Some("kube-api-qps"),
        Used,
        "the API client's rate limit",
    ),
    field(
        "clientConnection.burst",
        Some("kube-api-burst"),
        Used,
        "the API client's rate limit",
    ),
    field(
        "clientConnection.contentType",
        Some("kube-api-content-type"),
        Ignored,
        "the client speaks JSON",
    ),
    field(
        "clientConnection.acceptContentTypes",
        None,
        Ignored,
        "the client speaks JSON",
    ),
    field(
        "ipvs.scheduler",
        Some("ipvs-scheduler"),
        Used,
        "the virtual servers' scheduler",
    ),
    field(
        "ipvs.syncPeriod",
        Some("ipvs-sync-period"),
        Used,
        "full resync period; health timeout is twice it",
    ),
    field(
        "ipvs.minSyncPeriod",
        Some("ipvs-min-sync-period"),
        Used,
        "debounce of the sync loop",
    ),
    field(
        "ipvs.excludeCIDRs",
        Some("ipvs-exclude-cidrs"),
        Used,
        "virtual servers never deleted",
    ),
    field(
        "ipvs.gracefulTerminationTimeout",
        Some("ipvs-graceful-termination-timeout"),
        Used,
        "the agent's own: bound of a removed real server's drain (kube-proxy warns, ignores it)",
    ),
    field(
        "ipvs.vipBinding",
        Some("vip-binding"),
        Used,
        "the agent's own: VIPs as addresses on kube-ipvs0 (kube-proxy's way) or as local routes",
    ),
    field(
        "ipvs.allowedSchedulers",
        Some("ipvs-allowed-schedulers"),
        Used,
        "the agent's own: lblc/lblcr a Service's annotation may name though their module is not loaded",
    ),
    field(
        "ipvs.schedulerAnnotation",
        Some("ipvs-scheduler-annotation"),
        Used,
        "the agent's own: read a Service's scheduler from its annotation (default true)",
    ),
    field(
        "ipvs.serviceMetrics",
        Some("ipvs-service-metrics"),
        Used,
        "the agent's own: per-virtual-server IPVS counters on /metrics (kube_proxy_ipvs_service_*)",
    ),
    field(
        "ipvs.strictARP",
        Some("ipvs-strict-arp"),
        Used,
        "arp_ignore/arp_announce sysctls",
    ),
    field(
        "ipvs.tcpTimeout",
        Some("ipvs-tcp-timeout"),
        Used,
        "IPVS timeouts (ipvs_timeouts())",
    ),
    field(
        "ipvs.tcpFinTimeout",
        Some("ipvs-tcpfin-timeout"),
        Used,
        "IPVS timeouts (ipvs_timeouts())",
    ),
    field(
        "ipvs.udpTimeout",
        Some("ipvs-udp-timeout"),
        Used,
        "IPVS timeouts (ipvs_timeouts())",
    ),
    field(
        "iptables.masqueradeAll",
        Some("masquerade-all"),
        Used,
        "SNAT of all cluster-IP traffic",
    ),
    field(
        "iptables.masqueradeBit",
        Some("iptables-masquerade-bit"),
        Used,
        "the SNAT fwmark",
    ),
    field(
        "iptables.syncPeriod",
        Some("iptables-sync-period"),
        Ignored,
        "iptables mode only; ipvs.syncPeriod applies",
    ),
    field(
        "iptables.minSyncPeriod",
        Some("iptables-min-sync-period"),
        Ignored,
        "iptables mode only; ipvs.minSyncPeriod applies",
    ),
    field(
        "iptables.localhostNodePorts",
        Some("iptables-localhost-nodeports"),
        Ignored,
        "iptables mode only; IPVS never serves NodePorts on loopback",
    ),
    field(
        "iptables.snatNodeInternalIP",
        None,
        Ignored,
        "iptables mode only",
    ),
    field(
        "clusterCIDR",
        Some("cluster-cidr"),
        Used,
        "local traffic detection (ClusterCIDR) and the IP families",
    ),
    field(
        "detectLocalMode",
        Some("detect-local-mode"),
        Used,
        "local traffic detection",
    ),
    field(
        "detectLocal.bridgeInterface",
        Some("pod-bridge-interface"),
        Used,
        "local traffic detection (BridgeInterface)",
    ),
    field(
        "detectLocal.interfaceNamePrefix",
        Some("pod-interface-name-prefix"),
        Used,
        "local traffic detection (InterfaceNamePrefix)",
    ),
    field(
        "nodePortAddresses",
        Some("nodeport-addresses"),
        Used,
        "NodePort addresses; localhost is ignored",
    ),
    field(
        "oomScoreAdj",
        Some("oom-score-adj"),
        Used,
        "written to /proc/self/oom_score_adj (write_oom_score_adj())",
    ),
    field(
        "configSyncPeriod",
        Some("config-sync-period"),
        Ignored,
        "watches are level-triggered; ipvs.syncPeriod re-reads everything",
    ),
    field(
        "conntrack.maxPerCore",
        Some("conntrack-max-per-core"),
        Used,
        "nf_conntrack_max (conntrack_sysctls())",
    ),
    field(
        "conntrack.min",
        Some("conntrack-min"),
        Used,
        "nf_conntrack_max (conntrack_sysctls())",
    ),
    field(
        "conntrack.tcpEstablishedTimeout",
        Some("conntrack-tcp-timeout-established"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.tcpCloseWaitTimeout",
        Some("conntrack-tcp-timeout-close-wait"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.tcpBeLiberal",
        Some("conntrack-tcp-be-liberal"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.udpTimeout",
        Some("conntrack-udp-timeout"),
        Used,
        "conntrack_sysctls()",
    ),
    field(
        "conntrack.udpStreamTimeout",
        Some("conntrack-udp-timeout-stream"),
        Used,
        "conntrack_sysctls()",
    ),
    field("logging.verbosity", Some("v"), Used, "the log filter"),
    field(
        "logging.format",
        Some("logging-format"),
        Used,
        "text or json logs",
    ),
    field(
        "logging.flushFrequency",
        Some("log-flush-frequency"),
        Ignored,
        "logs are not buffered",
    ),
    field(
        "logging.vmodule",
        Some("vmodule"),
        Used,
        "a pattern naming one of the agent's modules sets its level; others are warned about",
    ),
    field(
        "logging.options.text.infoBufferSize",
        Some("log-text-info-buffer-size"),
        Ignored,
        "logs are not buffered",
    ),
    field(
        "logging.options.text.splitStream",
        Some("log-text-split-stream"),
        Ignored,
        "all logs go to stderr",
    ),
    field(
        "logging.options.json.infoBufferSize",
        Some("log-json-info-buffer-size"),
        Ignored,
        "logs are not buffered",
    ),
    field(
        "logging.options.json.splitStream",
        Some("log-json-split-stream"),
        Ignored,
        "all logs go to stderr",
    ),
    field(
        "portRange",
        None,
        Ignored,
        "unused since the userspace proxy was removed",
    ),
    field(
        "nftables.masqueradeAll",
        None,
        Ignored,
        "nftables mode only",
    ),
    field(
        "nftables.masqueradeBit",
        None,
        Ignored,
        "nftables mode only",
    ),
    field("nftables.syncPeriod", None, Ignored, "nftables mode only"),
    field(
        "nftables.minSyncPeriod",
        None,
        Ignored,
        "nftables mode only",
    ),
    field("winkernel.networkName", None, Ignored, "Windows only"),
    field("winkernel.sourceVip", None, Ignored, "Windows only"),
    field("winkernel.enableDSR", None, Ignored, "Windows only"),
    field(
        "winkernel.rootHnsEndpointName",
        None,
        Ignored,
        "Windows only",
    ),
    field(
        "winkernel.forwardHealthCheckVip",
        None,
        Ignored,
        "Windows only",
    ),
    field(
        "windowsRunAsService",
        Some("windows-service"),
        Ignored,
        "Windows only",
    ),
];
