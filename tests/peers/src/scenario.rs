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
    /// Objects (`Kind/name`) deleted once the takeover's kube-proxy has stopped and before
    /// either program starts: what it left for them is the agent's to remove.
    #[serde(default)]
    pub deleted_before_start: Vec<String>,
    /// Services and EndpointSlices (multi-document YAML; namespace `peers` unless given)
    /// present before the programs start.
    #[serde(default)]
    pub objects: String,
    /// Changes applied one after the other; the state is compared after each.
    #[serde(default)]
    pub steps: Vec<Step>,
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
mod many_documents {
    /// The e2e bursts hold thousands of documents: more than serde-saphyr's default budget.
    #[test]
    fn thousands_of_documents_are_read() {
        let one = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: default}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}\n";
        let text = vec![one; 5000].join("---\n");
        assert_eq!(super::objects(&text).unwrap().len(), 5000);
    }
}
