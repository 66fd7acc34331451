//! One side of the comparison: a named network namespace set up as the scenario's node, the
//! program that runs in it (upstream kube-proxy or the agent), its sync progress and the state
//! it left, read with the real tools.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use lab::guest::NamedNetns;
use lab::net::within;
use peers::scenario::Scenario;
use peers::state::{Sections, parse, script};

/// A namespace set up as the scenario's node.
pub struct NodeNs {
    /// The namespace.
    pub ns: NamedNetns,
}

/// The gateway of a CIDR: its first host address.
fn gateway(cidr: &str) -> Option<IpAddr> {
    let (ip, len) = cidr.split_once('/')?;
    let len: u32 = len.parse().ok()?;
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            Some(IpAddr::V4(((u32::from(a) & mask) + 1).into()))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            Some(IpAddr::V6(((u128::from(a) & mask) + 1).into()))
        }
    }
}

impl NodeNs {
    /// A namespace with the scenario's interfaces: `eth0` and the extra ones (dummy links, up,
    /// IPv6 addresses without duplicate detection), and a default route per family of `eth0`.
    pub fn new(prefix: &str, s: &Scenario) -> NodeNs {
        let ns = NamedNetns::new(prefix);
        let mut script = String::from("set -e\n");
        let mut links = vec![("eth0", &s.node.addresses)];
        links.extend(
            s.node
                .interfaces
                .iter()
                .map(|i| (i.name.as_str(), &i.addresses)),
        );
        for (name, addrs) in links {
            script.push_str(&format!(
                "ip link add {name} type dummy\nip link set {name} up\n"
            ));
            for a in addrs {
                let nodad = if a.contains(':') { " nodad" } else { "" };
                script.push_str(&format!("ip addr add {a} dev {name}{nodad}\n"));
            }
        }
        for family in [false, true] {
            if let Some(gw) = s
                .node
                .addresses
                .iter()
                .find(|a| a.contains(':') == family)
                .and_then(|a| gateway(a))
            {
                let v = if family { "-6 " } else { "" };
                script.push_str(&format!(
                    "ip {v}route add default via {gw} dev eth0 onlink\n"
                ));
            }
        }
        ns.sh(&script);
        NodeNs { ns }
    }

    /// The kernel state of the namespace, normalised, by section; an error when a reader
    /// failed.
    pub fn try_state(&self) -> Result<Sections> {
        parse(&self.ns.sh(&script())).with_context(|| format!("reading {}", self.ns.name()))
    }

    /// [`NodeNs::try_state`], for tests that stop at a failed reader.
    pub fn state(&self) -> Sections {
        self.try_state().unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// A TCP listener on every IPv4 address of the namespace at `port`, held until dropped:
    /// another program's socket in the way of a health-check node port.
    pub fn hold_port(&self, port: u16) -> std::net::TcpListener {
        within(&self.ns, move || {
            std::net::TcpListener::bind(("0.0.0.0", port))
        })
        .unwrap_or_else(|e| panic!("holding port {port}: {e}"))
    }

    /// Starts `program` with `args` in the namespace, its output in `log`.
    pub fn start(&self, program: &Path, args: &[String], log: &Path) -> Result<Program> {
        let out = File::create(log).with_context(|| log.display().to_string())?;
        let child = Command::new("ip")
            .args(["netns", "exec", self.ns.name()])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Program {
            child,
            log: log.to_path_buf(),
            name: program
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
        })
    }

    /// GETs `path` of the program's metrics (127.0.0.1:10249) or health (10256) server.
    fn get(&self, addr: &'static str, path: &'static str) -> Option<(u16, String)> {
        within(&self.ns, move || lab::net::http_get(addr, path).ok())
    }

    /// Whether the program has reported a sync that ended at or after `since` for every IP
    /// family, with every change queued since then synced, and answers `/healthz` (see
    /// [`NodeNs::wait_synced`]); with the oldest family's last sync and the health answer,
    /// for a message.
    pub fn sync_status(&self, since: SystemTime) -> (bool, Option<f64>, bool) {
        self.sync_status_of(since, None, None)
    }

    /// As [`NodeNs::sync_status`], for one IP family (`IPv4` or `IPv6`, the `ip_family`
    /// label) when `family` names one; with `event`, only once a change was queued at or
    /// after `since` (the program has seen the change made then).
    fn sync_status_of(
        &self,
        since: SystemTime,
        family: Option<&str>,
        event: Option<&mut Vec<SyncCounters>>,
    ) -> (bool, Option<f64>, bool) {
        let since = secs(since);
        let metrics = self.get("127.0.0.1:10249", "/metrics").map(|(code, body)| {
            let body = match family {
                Some(f) => of_family(&body, f),
                None => body,
            };
            (code, body)
        });
        let last = metrics.as_ref().and_then(|(_, body)| last_sync(body));
        let caught_up = metrics.as_ref().is_some_and(|(_, body)| match event {
            None => caught_up(body, since),
            Some(history) => {
                let done = queued_since(body, since) && started_after_queued(body, since, history);
                history.push(sync_counters(body));
                done
            }
        });
        let healthy = self
            .get("127.0.0.1:10256", "/healthz")
            .is_some_and(|(c, _)| c == 200);
        (
            healthy && last.is_some_and(|t| t >= since) && caught_up,
            last,
            healthy,
        )
    }

    /// Waits until the program reports a sync that ended at or after `since` for every IP
    /// family it serves (kube-proxy's `kubeproxy_sync_proxy_rules_last_timestamp_seconds`,
    /// which the agent exports with the same meaning) and answers `/healthz`.
    pub fn wait_synced(
        &self,
        program: &mut Program,
        since: SystemTime,
        limit: Duration,
    ) -> Result<()> {
        self.wait_synced_of(program, since, limit, None)
    }

    /// As [`NodeNs::wait_synced`], after a change made at `since`: only once the program has
    /// queued a sync for a change at or after `since` (kube-proxy's
    /// `kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds`, which moves when a watched
    /// change reaches the proxier) and synced after it. A sync that ended after `since` for
    /// another reason, before the change arrived, does not count.
    ///
    /// A sync that was already running when the change arrived also ends after it, without
    /// it: the sync that counts must have started after the change was queued. `mark`, taken
    /// before the change ([`NodeNs::sync_mark`]), is where that start is measured from.
    pub fn wait_synced_after_change(
        &self,
        program: &mut Program,
        since: SystemTime,
        limit: Duration,
        mark: SyncCounters,
    ) -> Result<()> {
        self.wait(program, since, limit, None, Some(vec![mark]))
    }

    /// The program's sync counters now, to pass to [`NodeNs::wait_synced_after_change`]
    /// for a change made next (empty when the program does not answer yet).
    pub fn sync_mark(&self) -> SyncCounters {
        self.get("127.0.0.1:10249", "/metrics")
            .map(|(_, body)| sync_counters(&body))
            .unwrap_or_default()
    }

    /// As [`NodeNs::wait_synced`], for one IP family when `family` names one (`IPv4` or
    /// `IPv6`): kube-proxy's iptables and nftables modes, run alone in a namespace, may never
    /// report a sync of a family that has no node address there.
    pub fn wait_synced_of(
        &self,
        program: &mut Program,
        since: SystemTime,
        limit: Duration,
        family: Option<&str>,
    ) -> Result<()> {
        self.wait(program, since, limit, family, None)
    }

    fn wait(
        &self,
        program: &mut Program,
        since: SystemTime,
        limit: Duration,
        family: Option<&str>,
        mut event: Option<Vec<SyncCounters>>,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = program.child.try_wait()? {
                bail!("{} exited ({status}):\n{}", program.name, program.tail(30));
            }
            let (synced, last, healthy) = self.sync_status_of(since, family, event.as_mut());
            if synced {
                return Ok(());
            }
            if Instant::now() > deadline {
                let since = secs(since);
                let seen = if event.is_some() {
                    ", after a change queued then"
                } else {
                    ""
                };
                bail!(
                    "{} did not sync within {limit:?} (last sync {last:?}, wanted >= {since:.1}{seen}, healthz {healthy}):\n{}",
                    program.name,
                    program.tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Seconds since the epoch, as the programs' timestamp metrics give them.
fn secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The lines of `metrics` without an `ip_family` label or with `family` as its value.
fn of_family(metrics: &str, family: &str) -> String {
    let wanted = format!("ip_family=\"{family}\"");
    metrics
        .lines()
        .filter(|l| !l.contains("ip_family=") || l.contains(&wanted))
        .flat_map(|l| [l, "\n"])
        .collect()
}

/// The oldest `kubeproxy_sync_proxy_rules_last_timestamp_seconds` sample (one per family).
fn last_sync(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("kubeproxy_sync_proxy_rules_last_timestamp_seconds"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::min)
        .filter(|t| *t > 0.0)
}

/// Samples of one metric by their label set.
fn samples<'a>(metrics: &'a str, name: &str) -> BTreeMap<&'a str, f64> {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = rest.rsplit_once(' ')?;
            if !(labels.is_empty() || labels.starts_with('{')) {
                return None;
            }
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

/// Whether every change queued since `since` has been synced: for each family, the last
/// sync is no older than the last change queued (a sync that ran just before the watch
/// delivered the change is not the one that applied it).
fn caught_up(metrics: &str, since: f64) -> bool {
    let queued = samples(
        metrics,
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    );
    let synced = samples(metrics, "kubeproxy_sync_proxy_rules_last_timestamp_seconds");
    queued
        .iter()
        .filter(|(_, q)| **q >= since)
        .all(|(labels, q)| synced.get(labels).is_some_and(|s| s >= q))
}

/// Each family's (label set's) sync count and summed sync time, from the
/// `kubeproxy_sync_proxy_rules_duration_seconds` histogram.
pub type SyncCounters = BTreeMap<String, (f64, f64)>;

fn sync_counters(metrics: &str) -> SyncCounters {
    let sums = samples(metrics, "kubeproxy_sync_proxy_rules_duration_seconds_sum");
    samples(metrics, "kubeproxy_sync_proxy_rules_duration_seconds_count")
        .into_iter()
        .map(|(labels, count)| {
            let sum = sums.get(labels).copied().unwrap_or_default();
            (labels.to_string(), (count, sum))
        })
        .collect()
}

/// Whether each family that queued a change at or after `since` has since run a sync that
/// started after the change was queued. A sync's start is its end less its time; over
/// several syncs since an earlier poll, their summed time gives an earlier bound, so the
/// test errs on waiting.
fn started_after_queued(metrics: &str, since: f64, history: &[SyncCounters]) -> bool {
    let queued = samples(
        metrics,
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    );
    let synced = samples(metrics, "kubeproxy_sync_proxy_rules_last_timestamp_seconds");
    let now = sync_counters(metrics);
    queued
        .iter()
        .filter(|(_, q)| **q >= since)
        .all(|(labels, q)| {
            let (Some(end), Some((count, sum))) = (synced.get(labels), now.get(*labels)) else {
                return false;
            };
            // The latest earlier poll with fewer syncs: the least time summed.
            // (A family without samples yet has synced none.)
            let Some((_, before)) = history
                .iter()
                .rev()
                .map(|h| h.get(*labels).copied().unwrap_or_default())
                .find(|(c, _)| c < count)
            else {
                return false;
            };
            // Millisecond slack: the two clocks read are the same, their rounding is not.
            end - (sum - before) >= q - 0.001
        })
}

/// Whether some family queued a sync at or after `since`.
fn queued_since(metrics: &str, since: f64) -> bool {
    samples(
        metrics,
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    )
    .values()
    .any(|q| *q >= since)
}

/// A program running in a namespace; killed when dropped.
pub struct Program {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Program {
    /// The last `n` lines of its output.
    pub fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Its process id (`ip netns exec` execs it, so this is the program itself): its
    /// `/proc/PID` has its CPU time, its memory and its namespace's `net/ip_vs`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills it (SIGKILL: neither kube-proxy nor the agent removes its state on exit, and a
    /// takeover must start from exactly what was programmed) and reaps it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_older_than_a_queued_change_is_not_caught_up() {
        let m = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 105\n\
                 kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 104\n\
                 kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv6\"} 90\n\
                 kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv6\"} 80\n";
        assert!(!caught_up(m, 100.0));
        assert!(caught_up(&m.replace("} 104", "} 106"), 100.0));
        // Caught up, but with nothing queued since 106: the change is not seen yet.
        assert!(caught_up(m, 106.0) && !queued_since(m, 106.0));
        assert!(queued_since(m, 105.0));
    }

    #[test]
    fn gateways_are_the_first_host() {
        assert_eq!(
            gateway("192.168.50.10/24"),
            Some("192.168.50.1".parse().unwrap())
        );
        assert_eq!(
            gateway("fd00:50::10/64"),
            Some("fd00:50::1".parse().unwrap())
        );
    }
}
