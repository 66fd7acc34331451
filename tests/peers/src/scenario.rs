//! The corpus's file format: one YAML file per scenario under `tests/peers/scenarios/`.
//!
//! A scenario describes one node (its interfaces and addresses, its Node object), the
//! kube-proxy flags or KubeProxyConfiguration both programs get, the API objects that exist
//! when they start and a list of steps (objects applied or deleted, node labels changed), after
//! each of which the two programs' kernel state is compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// One scenario of the corpus.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The file's stem (`010-cluster-ip-rr`), set by [`load`].
    #[serde(skip)]
    pub id: String,
    /// What kube-proxy behaviour the scenario pins, in a line.
    pub description: String,
    /// Part of the representative subset the test command runs.
    #[serde(default)]
    pub ci: bool,
    /// The node: its interfaces and its Node object.
    #[serde(default)]
    pub node: NodeSpec,
    /// Command-line flags, in kube-proxy's syntax, given to both programs.
    #[serde(default)]
    pub flags: Vec<String>,
    /// A KubeProxyConfiguration (YAML) given to both with `--config`; the harness adds its own
    /// fields (kubeconfig, hostname, bind addresses).
    #[serde(default)]
    pub config: Option<String>,
    /// Upstream kube-proxy runs first in the agent's namespace and is stopped, so the agent
    /// starts on state the real kube-proxy wrote.
    #[serde(default)]
    pub takeover: bool,
    /// The mode of the takeover's kube-proxy: `ipvs` (the default), or `iptables` or
    /// `nftables` for a node swapped from a stock cluster, whose rules the agent must remove.
    #[serde(default)]
    pub takeover_mode: Option<String>,
    /// Flags that replace the scenario's (same `--name=`) or add to them for the takeover's
    /// kube-proxy only: a node that kube-proxy ran with another configuration.
    #[serde(default)]
    pub takeover_flags: Vec<String>,
    /// Objects (`Kind/name`) deleted once the takeover's kube-proxy has stopped and before
    /// either program starts: what it left for them is the agent's to remove.
    #[serde(default)]
    pub deleted_before_start: Vec<String>,
    /// `ipvsadm` commands run in both namespaces before either program starts (after a
    /// takeover's kube-proxy): virtual servers another program made on the node.
    #[serde(default)]
    pub foreign: Vec<String>,
    /// Services and EndpointSlices (multi-document YAML; namespace `peers` unless given)
    /// present before the programs start.
    #[serde(default)]
    pub objects: String,
    /// Pod addresses (one /24, its `.1` the node's bridge): in each program's namespace, a
    /// pod namespace per address answers every TCP connection, UDP datagram and HTTP request
    /// on [`Scenario::pod_ports`] with its address and the source address it saw, so that the
    /// steps' [`Step::traffic`] goes through each program's state to real sockets.
    #[serde(default)]
    pub pods: Vec<String>,
    /// The ports the pods answer on.
    #[serde(default = "default_pod_ports")]
    pub pod_ports: Vec<u16>,
    /// Changes applied one after the other; the state is compared after each.
    #[serde(default)]
    pub steps: Vec<Step>,
}

fn default_pod_ports() -> Vec<u16> {
    vec![8080]
}

/// The node both programs run as.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Addresses (CIDR notation) of the node's `eth0`, in both namespaces.
    #[serde(default = "default_addresses")]
    pub addresses: Vec<String>,
    /// More interfaces (dummy links, up) with their addresses.
    #[serde(default)]
    pub interfaces: Vec<Interface>,
    /// The Node's `status.addresses` InternalIPs; by default the first address of each family
    /// on `eth0`, IPv4 first.
    #[serde(default)]
    pub internal_ips: Option<Vec<String>>,
    /// The Node's `spec.podCIDRs`.
    #[serde(default)]
    pub pod_cidrs: Vec<String>,
    /// The Node's labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec {
            addresses: default_addresses(),
            interfaces: Vec::new(),
            internal_ips: None,
            pod_cidrs: Vec::new(),
            labels: BTreeMap::new(),
        }
    }
}

fn default_addresses() -> Vec<String> {
    vec!["192.168.50.10/24".into()]
}

/// An extra interface of the node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interface {
    /// Its name (a dummy link).
    pub name: String,
    /// Its addresses, CIDR notation.
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// One change, after which the state is compared.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// What the step does, in a few words.
    pub name: String,
    /// Objects applied (server-side apply: created or replaced field by field).
    #[serde(default)]
    pub apply: String,
    /// Objects deleted, as `Kind/name` or `Kind/namespace/name` (`Service/web`,
    /// `EndpointSlice/web-1`).
    #[serde(default)]
    pub delete: Vec<String>,
    /// Labels set on the Node (an empty value removes the label).
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// Programs restarted after the step's changes (`kube-proxy`, `agent`): killed
    /// (SIGKILL) and started again with the same flags; each must come back to the same state.
    #[serde(default)]
    pub restart: Vec<String>,
    /// Requests sent through each program's namespace once the step is synced; what each
    /// side answered is compared like its kernel state (section `traffic`).
    #[serde(default)]
    pub traffic: Vec<Probe>,
    /// A change of the node itself: its addresses, InternalIPs or pod CIDRs. kube-proxy
    /// exits when its Node's IPs or (with `--detect-local-mode=NodeCIDR`) pod CIDRs change,
    /// for its DaemonSet to start it again: the harness does the same for either program.
    #[serde(default)]
    pub node: Option<NodeChange>,
}

/// A step's change of the node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeChange {
    /// Addresses (CIDR notation) added to `eth0` in both namespaces.
    #[serde(default)]
    pub add_addresses: Vec<String>,
    /// The Node's new InternalIPs.
    #[serde(default)]
    pub internal_ips: Option<Vec<String>>,
    /// The Node's new `spec.podCIDRs`: the API server changes them only on a new Node, so
    /// the Node is deleted and made again.
    #[serde(default)]
    pub pod_cidrs: Option<Vec<String>>,
}

/// Requests sent the same way through both programs' namespaces.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Probe {
    /// Where to: `ADDRESS:PORT` (`[v6]:PORT`), or `node:PORT` for the node's first address.
    pub to: String,
    /// `tcp` (the default), `udp`, or `http` (one GET of [`Probe::path`]).
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// `outside` (the default: a client namespace behind the node's address) or `node` (the
    /// node's own namespace).
    #[serde(default = "default_from")]
    pub from: String,
    /// How many requests, one connection or datagram each.
    #[serde(default = "default_requests")]
    pub requests: usize,
    /// A fixed UDP source port: every request is the same conntrack flow.
    #[serde(default)]
    pub source_port: Option<u16>,
    /// Compare only the distribution's shape (how many endpoints, how many answers each), not
    /// which endpoints answered: a session's pick is the program's own.
    #[serde(default)]
    pub shape: bool,
    /// The HTTP path.
    #[serde(default)]
    pub path: Option<String>,
    /// How many requests each side must get an answer to (default: all of them): two sides
    /// that both failed would otherwise compare equal.
    #[serde(default)]
    pub answered: Option<usize>,
}

fn default_protocol() -> String {
    "tcp".into()
}

fn default_from() -> String {
    "outside".into()
}

fn default_requests() -> usize {
    20
}

impl Probe {
    /// Checks the probe's fields.
    pub fn validate(&self) -> Result<()> {
        if !["tcp", "udp", "http"].contains(&self.protocol.as_str()) {
            bail!("protocol {:?}: tcp, udp or http", self.protocol);
        }
        if !["outside", "node"].contains(&self.from.as_str()) {
            bail!("from {:?}: outside or node", self.from);
        }
        if self.requests == 0 || self.requests > 200 {
            bail!("requests {}: 1 to 200", self.requests);
        }
        let port = self.to.rsplit_once(':').map(|(_, p)| p);
        if port.and_then(|p| p.parse::<u16>().ok()).is_none() {
            bail!("to {:?}: ADDRESS:PORT or node:PORT", self.to);
        }
        if self.answered.is_some_and(|n| n > self.requests) {
            bail!("answered: more than the {} requests", self.requests);
        }
        if self.source_port.is_some() && self.protocol != "udp" {
            bail!("source_port: only for udp");
        }
        Ok(())
    }
}

impl Step {
    /// Whether the step changes API objects (then each program that keeps running must see
    /// that change before the state is compared).
    pub fn changes_objects(&self) -> bool {
        !self.apply.trim().is_empty()
            || !self.delete.is_empty()
            || !self.node_labels.is_empty()
            || self.node.is_some()
    }
}

/// The flags of the takeover's kube-proxy: `flags` with each of `over` replacing the flag of
/// the same `--name=`, or added.
pub fn flags_over(flags: &[String], over: &[String]) -> Vec<String> {
    let name = |f: &str| f.split_once('=').map_or(f, |(n, _)| n).to_string();
    let mut out: Vec<String> = flags
        .iter()
        .filter(|f| !over.iter().any(|o| name(o) == name(f)))
        .cloned()
        .collect();
    out.extend(over.iter().cloned());
    out
}

/// The namespace of scenario objects that name none.
pub const NAMESPACE: &str = "peers";

/// An API object of a scenario, parsed from its YAML.
#[derive(Debug, Clone)]
pub struct Object {
    /// `Service` or `EndpointSlice`.
    pub kind: String,
    /// Its namespace ([`NAMESPACE`] unless the document names one).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The whole document, as JSON, with the namespace filled in.
    pub body: serde_json::Value,
}

/// Parses a multi-document YAML string of Services and EndpointSlices.
pub fn objects(yaml: &str) -> Result<Vec<Object>> {
    let mut out = Vec::new();
    // The e2e bursts hold thousands of documents, beyond serde-saphyr's default budget (1,024).
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: 1_000_000,
        },
    };
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options(yaml, options).context("documents")?;
    for (i, mut body) in docs.into_iter().enumerate() {
        if body.is_null() {
            continue;
        }
        let kind = body["kind"].as_str().unwrap_or_default().to_string();
        let api_version = body["apiVersion"].as_str().unwrap_or_default();
        match (kind.as_str(), api_version) {
            ("Service", "v1") | ("EndpointSlice", "discovery.k8s.io/v1") => {}
            _ => bail!(
                "document {}: {kind:?} of {api_version:?}: only v1 Services and discovery.k8s.io/v1 EndpointSlices",
                i + 1
            ),
        }
        let name = body["metadata"]["name"]
            .as_str()
            .with_context(|| format!("document {}: {kind} without metadata.name", i + 1))?
            .to_string();
        let namespace = match body["metadata"]["namespace"].as_str() {
            Some(ns) => ns.to_string(),
            None => {
                body["metadata"]["namespace"] = NAMESPACE.into();
                NAMESPACE.to_string()
            }
        };
        out.push(Object {
            kind,
            namespace,
            name,
            body,
        });
    }
    Ok(out)
}

/// A `Kind/name` or `Kind/namespace/name` of a step's `delete`: (kind, namespace, name).
pub fn deletion(text: &str) -> Result<(String, String, String)> {
    let parts: Vec<&str> = text.split('/').collect();
    let (kind, ns, name) = match parts.as_slice() {
        [kind, name] => (*kind, NAMESPACE, *name),
        [kind, ns, name] => (*kind, *ns, *name),
        _ => bail!("{text:?}: expected Kind/name or Kind/namespace/name"),
    };
    if !matches!(kind, "Service" | "EndpointSlice") || name.is_empty() {
        bail!("{text:?}: only Service and EndpointSlice objects can be deleted");
    }
    Ok((kind.into(), ns.into(), name.into()))
}

impl Scenario {
    /// Checks what serde cannot: every object parses, every deletion names an object kind.
    pub fn validate(&self) -> Result<()> {
        objects(&self.objects).context("objects")?;
        for s in &self.steps {
            objects(&s.apply).with_context(|| format!("step {:?}", s.name))?;
            for d in &s.delete {
                deletion(d).with_context(|| format!("step {:?}", s.name))?;
            }
        }
        for d in &self.deleted_before_start {
            deletion(d).context("deleted_before_start")?;
        }
        for s in &self.steps {
            for p in &s.traffic {
                p.validate()
                    .with_context(|| format!("step {:?}: traffic to {:?}", s.name, p.to))?;
            }
            if let Some(n) = &s.node {
                if n.add_addresses.iter().any(|a| !a.contains('/')) {
                    bail!("step {:?}: node addresses in CIDR notation", s.name);
                }
                if !s.restart.is_empty() {
                    bail!(
                        "step {:?}: a node change restarts what exits over it; no restart: too",
                        s.name
                    );
                }
                if n.add_addresses.is_empty() && n.internal_ips.is_none() && n.pod_cidrs.is_none() {
                    bail!("step {:?}: a node change that changes nothing", s.name);
                }
            }
            if !s.traffic.is_empty() && self.pods.is_empty() {
                bail!("step {:?}: traffic without pods", s.name);
            }
            if !s.changes_objects() && s.restart.is_empty() && s.traffic.is_empty() {
                bail!("step {:?} changes nothing", s.name);
            }
            for r in &s.restart {
                if !["kube-proxy", "agent"].contains(&r.as_str()) {
                    bail!("step {:?}: restart {r:?}: kube-proxy or agent", s.name);
                }
            }
        }
        for f in &self.foreign {
            if !f.starts_with("ipvsadm ") || f.contains([';', '&', '|', '`', '$']) {
                bail!("foreign {f:?}: one ipvsadm command");
            }
        }
        let subnets: std::collections::BTreeSet<&str> = self
            .pods
            .iter()
            .map(|p| p.rsplit_once('.').map_or(p.as_str(), |(net, _)| net))
            .collect();
        if subnets.len() > 1
            || self
                .pods
                .iter()
                .any(|p| p.parse::<std::net::Ipv4Addr>().is_err())
        {
            bail!("pods: IPv4 addresses of one /24");
        }
        if !self.takeover_flags.is_empty() && !self.takeover {
            bail!("takeover_flags: only with takeover: true");
        }
        if !self.deleted_before_start.is_empty() && !self.takeover {
            bail!("deleted_before_start: only with takeover: true");
        }
        if let Some(mode) = &self.takeover_mode {
            if !self.takeover {
                bail!("takeover_mode: only with takeover: true");
            }
            if !["ipvs", "iptables", "nftables"].contains(&mode.as_str()) {
                bail!("takeover_mode {mode:?}: ipvs, iptables or nftables");
            }
            // The harness writes `mode: ipvs` into a config file, which wins over the flag.
            if self.config.is_some() && mode != "ipvs" {
                bail!("takeover_mode {mode:?}: not with a config file");
            }
        }
        for a in self
            .node
            .addresses
            .iter()
            .chain(self.node.interfaces.iter().flat_map(|i| &i.addresses))
        {
            if !a.contains('/') {
                bail!("node address {a:?}: give a prefix length (192.168.50.10/24)");
            }
        }
        if let Some(c) = &self.config {
            let v: serde_json::Value = serde_saphyr::from_str(c).context("config")?;
            if v.get("kind").and_then(|k| k.as_str()) != Some("KubeProxyConfiguration") {
                bail!("config: not a KubeProxyConfiguration");
            }
        }
        Ok(())
    }

    /// The Node's InternalIPs: as given, or the first address of each family on `eth0`.
    pub fn internal_ips(&self) -> Vec<String> {
        if let Some(ips) = &self.node.internal_ips {
            return ips.clone();
        }
        let bare = |a: &String| a.split('/').next().unwrap_or(a).to_string();
        let v4 = self.node.addresses.iter().find(|a| !a.contains(':'));
        let v6 = self.node.addresses.iter().find(|a| a.contains(':'));
        v4.into_iter().chain(v6).map(bare).collect()
    }
}

/// The corpus directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// Loads one scenario file.
pub fn load(path: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse(&stem, &text).with_context(|| format!("{}", path.display()))
}

/// Parses and validates one scenario's YAML; `id` is its file stem.
pub fn parse(id: &str, text: &str) -> Result<Scenario> {
    let mut s: Scenario = serde_saphyr::from_str(text)?;
    s.id = id.to_string();
    s.validate()?;
    Ok(s)
}

/// The embedded corpus ([`crate::embedded::SCENARIOS`]), parsed.
pub fn embedded() -> Result<Vec<Scenario>> {
    crate::embedded::SCENARIOS
        .iter()
        .map(|(id, text)| parse(id, text).with_context(|| format!("scenario {id}")))
        .collect()
}

/// Every scenario of the corpus, in file-name order.
pub fn load_all() -> Result<Vec<Scenario>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths.iter().map(|p| load(p)).collect()
}

#[cfg(test)]
mod checks {
    use super::*;

    #[test]
    fn takeover_flags_replace_their_namesakes() {
        let flags = ["--ipvs-scheduler=rr".to_string(), "--v=2".to_string()];
        let over = [
            "--ipvs-scheduler=wrr".to_string(),
            "--masquerade-all".to_string(),
        ];
        assert_eq!(
            flags_over(&flags, &over),
            ["--v=2", "--ipvs-scheduler=wrr", "--masquerade-all"]
        );
    }

    #[test]
    fn steps_that_change_nothing_and_foreign_commands_that_are_not_ipvsadm_are_refused() {
        let base = "description: x\nsteps:\n";
        assert!(parse("x", &format!("{base}- name: nothing\n")).is_err());
        assert!(parse("x", &format!("{base}- name: r\n  restart: [agent]\n")).is_ok());
        assert!(parse("x", &format!("{base}- name: r\n  restart: [kubelet]\n")).is_err());
        let both = "- name: n\n  node: {internal_ips: [192.168.50.11]}\n  restart: [agent]\n";
        assert!(parse("x", &format!("{base}{both}")).is_err());
        let foreign = "description: x\nforeign: [\"ipvsadm -A -t 198.18.0.1:80 -s rr; reboot\"]\n";
        assert!(parse("x", foreign).is_err());
    }
}

#[cfg(test)]
mod many_documents {
    /// The e2e bursts hold thousands of documents: more than serde-saphyr's default budget.
    #[test]
    fn thousands_of_documents_are_read() {
        let one = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: default}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}\n";
        let text = vec![one; 5000].join("---\n");
        assert_eq!(super::objects(&text).unwrap().len(), 5000);
    }
}
