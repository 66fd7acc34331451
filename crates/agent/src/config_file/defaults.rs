//! v1alpha1's defaulting and the platform defaults.

use std::net::IpAddr;

use super::{
    API_VERSION, GoDuration, HEALTHZ_PORT, KIND, KubeProxyConfiguration, METRICS_PORT,
    TimeOrDuration,
};

impl KubeProxyConfiguration {
    /// An empty v1alpha1 object (what `apiVersion` and `kind` alone decode to).
    pub fn empty() -> Self {
        Self {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            ..Self::default()
        }
    }

    /// The effective configuration when nothing is given: the empty object, defaulted.
    pub fn defaults() -> Self {
        let mut c = Self::empty();
        c.apply_defaults();
        c
    }

    /// v1alpha1's defaulting (`SetDefaults_KubeProxyConfiguration`), component-base's
    /// recommended logging settings, and the platform defaults: `mode` becomes `ipvs` (not
    /// kube-proxy's `iptables`: this is an IPVS proxy), `detectLocalMode` `ClusterCIDR`, and
    /// `ipvs.scheduler` `rr` (kube-proxy leaves it empty and means `rr`).
    pub fn apply_defaults(&mut self) {
        if self.bind_address.is_empty() {
            self.bind_address = "0.0.0.0".into();
        }
        let v6 = matches!(
            crate::sloppy_ip::parse_ip(&self.bind_address),
            Some(IpAddr::V6(_))
        );
        let (any, local) = if v6 {
            ("[::]", "[::1]")
        } else {
            ("0.0.0.0", "127.0.0.1")
        };
        if self.healthz_bind_address.is_empty() {
            self.healthz_bind_address = format!("{any}:{HEALTHZ_PORT}");
        }
        if self.metrics_bind_address.is_empty() {
            self.metrics_bind_address = format!("{local}:{METRICS_PORT}");
        }
        self.normalize_bind_addresses();
        self.oom_score_adj.get_or_insert(-999);
        default_duration(&mut self.iptables.sync_period, 30);
        default_duration(&mut self.iptables.min_sync_period, 1);
        self.iptables.masquerade_bit.get_or_insert(14);
        self.iptables.localhost_node_ports.get_or_insert(true);
        default_duration(&mut self.ipvs.sync_period, 30);
        default_duration(&mut self.nftables.sync_period, 30);
        default_duration(&mut self.nftables.min_sync_period, 1);
        self.nftables.masquerade_bit.get_or_insert(14);
        self.conntrack.max_per_core.get_or_insert(32 * 1024);
        self.conntrack.min.get_or_insert(128 * 1024);
        self.conntrack
            .tcp_established_timeout
            .get_or_insert(GoDuration::from_secs(24 * 3600));
        self.conntrack
            .tcp_close_wait_timeout
            .get_or_insert(GoDuration::from_secs(3600));
        default_duration(&mut self.config_sync_period, 15 * 60);
        if self.client_connection.content_type.is_empty() {
            self.client_connection.content_type = "application/vnd.kubernetes.protobuf".into();
        }
        if self.client_connection.qps == 0.0 {
            self.client_connection.qps = 5.0;
        }
        if self.client_connection.burst == 0 {
            self.client_connection.burst = 10;
        }
        if self.logging.format.is_empty() {
            self.logging.format = "text".into();
        }
        if self.logging.flush_frequency.0.is_zero() {
            self.logging.flush_frequency = TimeOrDuration(GoDuration::from_secs(5));
        }
        for o in [
            &mut self.logging.options.json,
            &mut self.logging.options.text,
        ] {
            if o.info_buffer_size.is_empty() {
                o.info_buffer_size = "0".into();
            }
        }
        if self.mode.is_empty() {
            self.mode = "ipvs".into();
        }
        if self.detect_local_mode.is_empty() {
            self.detect_local_mode = "ClusterCIDR".into();
        }
        if self.ipvs.scheduler.is_empty() {
            self.ipvs.scheduler = "rr".into();
        }
    }

    /// kube-proxy's `AppendPortIfNeeded`: a bind address given as a bare IP gets the default
    /// port.
    pub fn normalize_bind_addresses(&mut self) {
        append_port(&mut self.healthz_bind_address, HEALTHZ_PORT);
        append_port(&mut self.metrics_bind_address, METRICS_PORT);
    }
}

fn default_duration(d: &mut GoDuration, secs: i64) {
    if d.is_zero() {
        *d = GoDuration::from_secs(secs);
    }
}

pub(super) fn append_port(addr: &mut String, port: u16) {
    match crate::sloppy_ip::parse_ip(addr) {
        Some(IpAddr::V4(ip)) => *addr = format!("{ip}:{port}"),
        Some(IpAddr::V6(ip)) => *addr = format!("[{ip}]:{port}"),
        None => {}
    }
}
