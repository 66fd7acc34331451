//! kube-proxy's validation of a defaulted configuration.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::interface;
use super::{API_VERSION, Error, FieldError, GoDuration, KIND, KubeProxyConfiguration, Problem};
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
            push.add("apiVersion", format!("must be {API_VERSION}"));
        }
        if self.kind != KIND {
            push.add("kind", format!("must be {KIND}"));
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
            push.add(
                "iptables.masqueradeBit",
                format!("{bit}: must be within the range [0, 31]"),
            );
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
                        format!(
                            "{s:?}: only the schedulers IPVS would load under its lock need allowing ({})",
                            crate::model::desired::scheduler::LOADED_UNDER_LOCK.join(", ")
                        ),
                    );
                }
            }
            let s = &self.ipvs.scheduler;
            if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                push.add(
                    "ipvs.scheduler",
                    format!("{s:?} is not an IPVS scheduler name"),
                );
            }
        }
        if self.mode == "nftables" {
            if let Some(bit) = self.nftables.masquerade_bit
                && !(0..=31).contains(&bit)
            {
                push.add(
                    "nftables.masqueradeBit",
                    format!("{bit}: must be within the range [0, 31]"),
                );
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
                push.add(name, format!("{v}: must be greater than or equal to 0"));
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
                format!(
                    "{:?}: must be iptables, ipvs, nftables or blank (blank means the best-available proxy)",
                    self.mode
                ),
            );
        }
        if self.client_connection.burst < 0 {
            push.add(
                "clientConnection.burst",
                format!(
                    "{}: must be greater than or equal to 0",
                    self.client_connection.burst
                ),
            );
        }
        if let Some(v) = self.oom_score_adj
            && !(-1000..=1000).contains(&v)
        {
            push.add(
                "oomScoreAdj",
                format!("{v}: must be within the range [-1000, 1000]"),
            );
        }
        if self.config_sync_period.as_nanos() <= 0 {
            push.add(
                "configSyncPeriod",
                format!("{}: must be greater than 0", self.config_sync_period),
            );
        }
    }

    /// Bind addresses, `clusterCIDR`, `portRange` and `nodePortAddresses`.
    fn check_addresses(&self, push: &mut Errs) {
        if self.bind_address.parse::<IpAddr>().is_err() {
            push.add(
                "bindAddress",
                format!("{:?}: must be a valid IP address", self.bind_address),
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
                "primary" if npa.len() > 1 => push.add(
                    &format!("nodePortAddresses[{i}]"),
                    "\"primary\" cannot be combined with CIDRs",
                ),
                "primary" | "all" | "localhost" => {}
                cidr => {
                    if let Err(m) = parse_cidr(cidr) {
                        push.add(
                            &format!("nodePortAddresses[{i}]"),
                            format!("{m} (nor primary, all or localhost)"),
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
                    format!("{v:?}: must be <major>.<minor>, e.g. 1.33"),
                );
            }
        }
        match self.detect_local_mode.as_str() {
            "" | "ClusterCIDR" | "NodeCIDR" => {}
            "BridgeInterface" => {
                if self.detect_local.bridge_interface.is_empty() {
                    push.add(
                        "detectLocal.bridgeInterface",
                        "must not be empty when detectLocalMode is BridgeInterface",
                    );
                }
            }
            "InterfaceNamePrefix" => {
                if self.detect_local.interface_name_prefix.is_empty() {
                    push.add(
                        "detectLocal.interfaceNamePrefix",
                        "must not be empty when detectLocalMode is InterfaceNamePrefix",
                    );
                }
            }
            other => push.add(
                "detectLocalMode",
                format!(
                    "{other:?}: supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\""
                ),
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
            push.add("hostnameOverride", "must not be only white space");
        }
    }

    /// `logging`.
    fn check_logging(&self, push: &mut Errs) {
        if !matches!(self.logging.format.as_str(), "" | "text" | "json") {
            push.add(
                "logging.format",
                format!("{:?}: must be text or json", self.logging.format),
            );
        }
        if self.logging.flush_frequency.0.is_negative() {
            push.add(
                "logging.flushFrequency",
                "must be greater than or equal to 0",
            );
        }
        for (i, m) in self.logging.vmodule.iter().enumerate() {
            if m.file_pattern.is_empty() || m.file_pattern.contains([',', '=']) {
                push.add(
                    &format!("logging.vmodule[{i}].filePattern"),
                    format!(
                        "{:?}: must be a non-empty pattern without , or =",
                        m.file_pattern
                    ),
                );
            }
        }
    }

    /// Splits `clusterCIDR`: at most two CIDRs, and two only as a dual-stack pair.
    pub fn cluster_cidrs(&self) -> Result<Vec<IpNet>, String> {
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
            [_, _] => Err(format!(
                "{:?}: must be a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
                self.cluster_cidr
            )),
            _ => Err(format!(
                "{:?}: only one CIDR allowed or a valid DualStack CIDR (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
                self.cluster_cidr
            )),
        }
    }
}

fn check_periods(section: &str, sync: GoDuration, min: GoDuration, push: &mut Errs) {
    if sync.as_nanos() <= 0 {
        push.add(
            &format!("{section}.syncPeriod"),
            format!("{sync}: must be greater than 0"),
        );
    }
    if min.is_negative() {
        push.add(
            &format!("{section}.minSyncPeriod"),
            format!("{min}: must be greater than or equal to 0"),
        );
    } else if min > sync {
        push.add(
            &format!("{section}.minSyncPeriod"),
            format!("{min}: must be less than or equal to {section}.syncPeriod ({sync})"),
        );
    }
}

fn non_negative(name: &str, d: GoDuration, push: &mut Errs) {
    if d.is_negative() {
        push.add(name, format!("{d}: must be greater than or equal to 0"));
    }
}

/// A CIDR as Go's `net.ParseCIDR` takes it (host bits may be set); a bare address is refused.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .map_err(|_| format!("{s:?} is not a valid CIDR (e.g. 10.0.0.0/8)"))
}

/// `IP:port`, IPv6 in brackets, port 1..=65535.
pub fn parse_host_port(s: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = s.parse().map_err(|_| format!("{s:?}: must be IP:port"))?;
    if addr.port() == 0 {
        return Err(format!("{s:?}: must be a valid port (1-65535)"));
    }
    Ok(addr)
}

/// `utilnet.ParsePortRange`: empty, `low-high` or `base+size`.
fn parse_port_range(s: &str) -> Result<(), String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(());
    }
    let bad = || format!("{s:?}: must be a valid port range (e.g. 300-2000)");
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
