//! kube-proxy's validation of a defaulted configuration.

use std::net::SocketAddr;

use ipnet::IpNet;

use super::interface;
use super::{
    API_VERSION, Error, FieldError, GoDuration, KIND, KubeProxyConfiguration, Number, Problem,
};
use crate::model::snapshot::cluster::Family;

/// The field errors found so far.
struct Errs(Vec<FieldError>);

impl Errs {
    fn add(&mut self, field: &str, message: impl Into<Problem>) {
        self.0.push(FieldError::new(field, message));
    }
}

impl KubeProxyConfiguration {
    /// kube-proxy's validation (`pkg/proxy/apis/config/validation`), for a defaulted
    /// configuration. Every error is reported, each naming its field.
    pub fn validate(&self) -> Result<(), Error> {
        let mut push = Errs(Vec::new());

        if self.api_version != API_VERSION {
            push.add(
                "apiVersion",
                Problem::MustBe {
                    expected: API_VERSION,
                },
            );
        }
        if self.kind != KIND {
            push.add("kind", Problem::MustBe { expected: KIND });
        }
        self.check_modes(&mut push);
        self.check_conntrack(&mut push);
        self.check_process(&mut push);
        self.check_addresses(&mut push);
        self.check_node_and_detection(&mut push);
        self.check_logging(&mut push);
        if push.0.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid(push.0))
        }
    }

    /// The per-mode sections: `iptables` in every mode, as kube-proxy does, `ipvs` and
    /// `nftables` in theirs.
    fn check_modes(&self, push: &mut Errs) {
        // IPTables is validated in every mode, as kube-proxy does.
        if let Some(bit) = self.iptables.masquerade_bit
            && !(0..=31).contains(&bit)
        {
            push.add("iptables.masqueradeBit", bit_out_of_range(bit));
        }
        check_periods(
            "iptables",
            self.iptables.sync_period,
            self.iptables.min_sync_period,
            push,
        );
        if self.mode == "ipvs" {
            check_periods(
                "ipvs",
                self.ipvs.sync_period,
                self.ipvs.min_sync_period,
                push,
            );
            for (name, d) in [
                ("ipvs.tcpTimeout", self.ipvs.tcp_timeout),
                ("ipvs.tcpFinTimeout", self.ipvs.tcp_fin_timeout),
                ("ipvs.udpTimeout", self.ipvs.udp_timeout),
            ] {
                non_negative(name, d, push);
            }
            for (i, c) in self.ipvs.exclude_cidrs.iter().enumerate() {
                if let Err(m) = parse_cidr(c) {
                    push.add(&format!("ipvs.excludeCIDRs[{i}]"), m);
                }
            }
            for (i, s) in self.ipvs.allowed_schedulers.iter().enumerate() {
                if !crate::model::desired::scheduler::LOADED_UNDER_LOCK.contains(&s.as_str()) {
                    push.add(
                        &format!("ipvs.allowedSchedulers[{i}]"),
                        Problem::NotLoadedUnderLock {
                            scheduler: s.clone(),
                        },
                    );
                }
            }
            let s = &self.ipvs.scheduler;
            if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                push.add(
                    "ipvs.scheduler",
                    Problem::NotASchedulerName { name: s.clone() },
                );
            }
        }
        if self.mode == "nftables" {
            if let Some(bit) = self.nftables.masquerade_bit
                && !(0..=31).contains(&bit)
            {
                push.add("nftables.masqueradeBit", bit_out_of_range(bit));
            }
            check_periods(
                "nftables",
                self.nftables.sync_period,
                self.nftables.min_sync_period,
                push,
            );
        }
    }

    /// `conntrack`: counts and timeouts not negative.
    fn check_conntrack(&self, push: &mut Errs) {
        let ct = &self.conntrack;
        for (name, v) in [
            ("conntrack.maxPerCore", ct.max_per_core),
            ("conntrack.min", ct.min),
        ] {
            if let Some(v) = v
                && v < 0
            {
                push.add(
                    name,
                    Problem::Negative {
                        got: Some(Number::Int(v.into())),
                    },
                );
            }
        }
        for (name, d) in [
            (
                "conntrack.tcpEstablishedTimeout",
                ct.tcp_established_timeout.unwrap_or_default(),
            ),
            (
                "conntrack.tcpCloseWaitTimeout",
                ct.tcp_close_wait_timeout.unwrap_or_default(),
            ),
            ("conntrack.udpTimeout", ct.udp_timeout),
            ("conntrack.udpStreamTimeout", ct.udp_stream_timeout),
        ] {
            non_negative(name, d, push);
        }
    }

    /// The mode's name, the client's burst, `oomScoreAdj` and `configSyncPeriod`.
    fn check_process(&self, push: &mut Errs) {
        if !matches!(self.mode.as_str(), "" | "iptables" | "ipvs" | "nftables") {
            push.add(
                "mode",
                Problem::UnknownMode {
                    mode: self.mode.clone(),
                },
            );
        }
        if self.client_connection.burst < 0 {
            push.add(
                "clientConnection.burst",
                Problem::Negative {
                    got: Some(Number::Int(self.client_connection.burst.into())),
                },
            );
        }
        if let Some(v) = self.oom_score_adj
            && !(-1000..=1000).contains(&v)
        {
            push.add(
                "oomScoreAdj",
                Problem::OutOfRange {
                    got: Some(v.into()),
                    min: -1000,
                    max: 1000,
                },
            );
        }
        if self.config_sync_period.as_nanos() <= 0 {
            push.add(
                "configSyncPeriod",
                Problem::NotPositive {
                    got: self.config_sync_period,
                },
            );
        }
    }

    /// Bind addresses, `clusterCIDR`, `portRange` and `nodePortAddresses`.
    fn check_addresses(&self, push: &mut Errs) {
        if crate::sloppy_ip::parse_ip(&self.bind_address).is_none() {
            push.add(
                "bindAddress",
                Problem::NotAnIp {
                    value: self.bind_address.clone(),
                },
            );
        }
        if !self.healthz_bind_address.is_empty()
            && let Err(m) = parse_host_port(&self.healthz_bind_address)
        {
            push.add("healthzBindAddress", m);
        }
        if !self.metrics_bind_address.is_empty()
            && let Err(m) = parse_host_port(&self.metrics_bind_address)
        {
            push.add("metricsBindAddress", m);
        }
        if let Err(m) = self.cluster_cidrs() {
            push.add("clusterCIDR", m);
        }
        if let Err(m) = parse_port_range(&self.port_range) {
            push.add("portRange", m);
        }
        let npa = &self.node_port_addresses;
        for (i, a) in npa.iter().enumerate() {
            match a.as_str() {
                "primary" if npa.len() > 1 => {
                    push.add(&format!("nodePortAddresses[{i}]"), Problem::PrimaryNotAlone)
                }
                "primary" | "all" | "localhost" => {}
                cidr => {
                    if parse_cidr(cidr).is_err() {
                        push.add(
                            &format!("nodePortAddresses[{i}]"),
                            Problem::NotANodePortAddress {
                                value: cidr.to_string(),
                            },
                        );
                    }
                }
            }
        }
    }

    /// `showHiddenMetricsForVersion`, local traffic detection with its interface names, and
    /// `hostnameOverride`.
    fn check_node_and_detection(&self, push: &mut Errs) {
        let v = &self.show_hidden_metrics_for_version;
        if !v.is_empty() {
            let ok = v
                .split_once('.')
                .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
            if !ok {
                push.add(
                    "showHiddenMetricsForVersion",
                    Problem::NotAVersion { value: v.clone() },
                );
            }
        }
        match self.detect_local_mode.as_str() {
            "" | "ClusterCIDR" | "NodeCIDR" => {}
            "BridgeInterface" => {
                if self.detect_local.bridge_interface.is_empty() {
                    push.add(
                        "detectLocal.bridgeInterface",
                        Problem::EmptyForMode {
                            mode: "BridgeInterface",
                        },
                    );
                }
            }
            "InterfaceNamePrefix" => {
                if self.detect_local.interface_name_prefix.is_empty() {
                    push.add(
                        "detectLocal.interfaceNamePrefix",
                        Problem::EmptyForMode {
                            mode: "InterfaceNamePrefix",
                        },
                    );
                }
            }
            other => push.add(
                "detectLocalMode",
                Problem::UnknownDetectLocalMode {
                    mode: other.to_string(),
                },
            ),
        }
        // Any name that is set, whatever the mode: it reaches the iptables-restore input as
        // soon as the mode names it, and an empty one is refused above when the mode needs it.
        for (field, name, usage) in [
            (
                "detectLocal.bridgeInterface",
                &self.detect_local.bridge_interface,
                interface::Use::Name,
            ),
            (
                "detectLocal.interfaceNamePrefix",
                &self.detect_local.interface_name_prefix,
                interface::Use::Prefix,
            ),
        ] {
            if !name.is_empty()
                && let Err(m) = interface::check(name, usage)
            {
                push.add(field, m);
            }
        }
        if !self.hostname_override.is_empty() && self.hostname_override.trim().is_empty() {
            push.add("hostnameOverride", Problem::OnlyWhiteSpace);
        }
    }

    /// `logging`.
    fn check_logging(&self, push: &mut Errs) {
        if !matches!(self.logging.format.as_str(), "" | "text" | "json") {
            push.add(
                "logging.format",
                Problem::UnknownLogFormat {
                    format: self.logging.format.clone(),
                },
            );
        }
        if self.logging.flush_frequency.0.is_negative() {
            push.add("logging.flushFrequency", Problem::Negative { got: None });
        }
        for (i, m) in self.logging.vmodule.iter().enumerate() {
            if m.file_pattern.is_empty() || m.file_pattern.contains([',', '=']) {
                push.add(
                    &format!("logging.vmodule[{i}].filePattern"),
                    Problem::BadFilePattern {
                        pattern: m.file_pattern.clone(),
                    },
                );
            }
        }
    }

    /// Splits `clusterCIDR`: at most two CIDRs, and two only as a dual-stack pair.
    pub fn cluster_cidrs(&self) -> Result<Vec<IpNet>, Problem> {
        if self.cluster_cidr.trim().is_empty() {
            return Ok(Vec::new());
        }
        let cidrs = self
            .cluster_cidr
            .split(',')
            .map(|c| parse_cidr(c.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        match cidrs.as_slice() {
            [_] => Ok(cidrs),
            [a, b] if Family::of(&a.addr()) != Family::of(&b.addr()) => Ok(cidrs),
            [_, _] => Err(Problem::NotDualStack {
                value: self.cluster_cidr.clone(),
            }),
            _ => Err(Problem::TooManyCidrs {
                value: self.cluster_cidr.clone(),
            }),
        }
    }
}

fn check_periods(section: &str, sync: GoDuration, min: GoDuration, push: &mut Errs) {
    if sync.as_nanos() <= 0 {
        push.add(
            &format!("{section}.syncPeriod"),
            Problem::NotPositive { got: sync },
        );
    }
    if min.is_negative() {
        push.add(
            &format!("{section}.minSyncPeriod"),
            Problem::Negative {
                got: Some(Number::Duration(min)),
            },
        );
    } else if min > sync {
        push.add(
            &format!("{section}.minSyncPeriod"),
            Problem::AboveLimit {
                got: min,
                limit_field: format!("{section}.syncPeriod"),
                limit: sync,
            },
        );
    }
}

/// A masquerade bit outside [0, 31].
fn bit_out_of_range(bit: i32) -> Problem {
    Problem::OutOfRange {
        got: Some(bit.into()),
        min: 0,
        max: 31,
    }
}

fn non_negative(name: &str, d: GoDuration, push: &mut Errs) {
    if d.is_negative() {
        push.add(
            name,
            Problem::Negative {
                got: Some(Number::Duration(d)),
            },
        );
    }
}

/// A CIDR as kube-proxy's validation takes it (`ParseCIDRSloppy`: leading zeros allowed),
/// host bits masked off as that returns it; a bare address is refused.
pub fn parse_cidr(s: &str) -> Result<IpNet, Problem> {
    crate::sloppy_ip::parse_cidr(s).ok_or_else(|| Problem::NotACidr {
        value: s.to_string(),
    })
}

/// `IP:port` as kube-proxy's `validateHostPort` takes it: Go's `net.SplitHostPort` (IPv6 in
/// brackets), the host by `ParseIPSloppy`, the port by `strconv.Atoi` in 1..=65535.
pub fn parse_host_port(s: &str) -> Result<SocketAddr, Problem> {
    let not = || Problem::NotHostPort {
        value: s.to_string(),
    };
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']').ok_or_else(not)?;
            (host, after.strip_prefix(':').ok_or_else(not)?)
        }
        None => {
            let (host, port) = s.rsplit_once(':').ok_or_else(not)?;
            if host.contains([':', '[', ']']) {
                return Err(not());
            }
            (host, port)
        }
    };
    if port.contains(['[', ']']) {
        return Err(not());
    }
    let ip = crate::sloppy_ip::parse_ip(host).ok_or_else(not)?;
    let digits = port.strip_prefix('+').unwrap_or(port);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not());
    }
    match digits.trim_start_matches('0') {
        "" => Err(Problem::PortZero {
            value: s.to_string(),
        }),
        d => match d.parse::<u16>() {
            Ok(port) => Ok(SocketAddr::new(ip, port)),
            Err(_) => Err(not()),
        },
    }
}

/// `utilnet.ParsePortRange`: empty, `low-high` or `base+size`.
fn parse_port_range(s: &str) -> Result<(), Problem> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(());
    }
    let bad = || Problem::NotAPortRange {
        value: s.to_string(),
    };
    let (low, high) = if let Some((a, b)) = s.split_once('-') {
        let a: u32 = a.parse().map_err(|_| bad())?;
        let b: u32 = b.parse().map_err(|_| bad())?;
        (a, b)
    } else if let Some((a, n)) = s.split_once('+') {
        let a: u32 = a.parse().map_err(|_| bad())?;
        let n: u32 = n.parse().map_err(|_| bad())?;
        (a, a.saturating_add(n).saturating_sub(1))
    } else {
        let a: u32 = s.parse().map_err(|_| bad())?;
        (a, a)
    };
    if low > high || high > 65535 {
        return Err(bad());
    }
    Ok(())
}
