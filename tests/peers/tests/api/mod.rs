//! The scenario's objects in the real API server, through kube-rs with the admin credentials:
//! server-side apply (status through the status subresource), deletes, the Node.

use std::path::Path;

use anyhow::{Context, Result};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use peers::scenario::{NAMESPACE, Object, Scenario, deletion};
use serde_json::json;

/// A client of the test control plane, on its own runtime (the tests are synchronous).
pub struct Cluster {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

fn resource(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "Service" => ("", "v1", "services"),
        "EndpointSlice" => ("discovery.k8s.io", "v1", "endpointslices"),
        "Node" => ("", "v1", "nodes"),
        "Namespace" => ("", "v1", "namespaces"),
        "Event" => ("events.k8s.io", "v1", "events"),
        other => panic!("no resource for {other}"),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply("peers-harness").force()
}

impl Cluster {
    /// A client from a kubeconfig file (its current context).
    pub fn connect(kubeconfig: &Path) -> Result<Cluster> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let client = rt.block_on(async {
            let kc = Kubeconfig::read_from(kubeconfig)?;
            let config =
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
            anyhow::Ok(kube::Client::try_from(config)?)
        })?;
        Ok(Cluster { rt, client })
    }

    fn api(&self, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
        let ar = resource(kind);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Creates the scenarios' namespace unless it exists.
    pub fn ensure_namespace(&self) -> Result<()> {
        let body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
        self.rt.block_on(self.api("Namespace", None).patch(
            NAMESPACE,
            &apply_params(),
            &Patch::Apply(body),
        ))?;
        Ok(())
    }

    /// Creates these namespaces unless they exist (the bench spreads its Services over
    /// namespaces as `scale`'s generator does).
    pub fn ensure_namespaces(&self, names: &[String]) -> Result<()> {
        self.rt.block_on(async {
            for name in names {
                let body =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
                self.api("Namespace", None)
                    .patch(name, &apply_params(), &Patch::Apply(body))
                    .await
                    .with_context(|| format!("namespace {name}"))?;
            }
            Ok(())
        })
    }

    /// Applies objects; a `status` in a document goes to the status subresource too.
    pub fn apply(&self, objects: &[Object]) -> Result<()> {
        self.rt.block_on(async {
            for o in objects {
                let api = self.api(&o.kind, Some(&o.namespace));
                let mut body = o.body.clone();
                let status = body.as_object_mut().and_then(|b| b.remove("status"));
                api.patch(&o.name, &apply_params(), &Patch::Apply(&body))
                    .await
                    .with_context(|| format!("applying {} {}/{}", o.kind, o.namespace, o.name))?;
                if let Some(status) = status {
                    let patch =
                        json!({"apiVersion": body["apiVersion"], "kind": o.kind, "status": status});
                    api.patch_status(&o.name, &apply_params(), &Patch::Apply(&patch))
                        .await
                        .with_context(|| format!("status of {} {}", o.kind, o.name))?;
                }
            }
            Ok(())
        })
    }

    /// Applies many objects, `parallel` requests at a time (a burst, as a controller makes).
    pub fn apply_concurrently(&self, objects: &[Object], parallel: usize) -> Result<()> {
        use futures::stream::{self, TryStreamExt};
        self.rt.block_on(
            stream::iter(objects.iter().map(Ok::<_, anyhow::Error>)).try_for_each_concurrent(
                parallel,
                |o| async move {
                    self.api(&o.kind, Some(&o.namespace))
                        .patch(&o.name, &apply_params(), &Patch::Apply(&o.body))
                        .await
                        .with_context(|| format!("applying {} {}", o.kind, o.name))?;
                    Ok(())
                },
            ),
        )
    }

    /// Deletes the Node `name`.
    pub fn delete_node(&self, name: &str) -> Result<()> {
        self.rt.block_on(
            self.api("Node", None)
                .delete(name, &DeleteParams::default()),
        )?;
        Ok(())
    }

    /// Deletes `Kind/name` objects.
    pub fn delete(&self, what: &[String]) -> Result<()> {
        self.rt.block_on(async {
            for w in what {
                let (kind, ns, name) = deletion(w)?;
                self.api(&kind, Some(&ns))
                    .delete(&name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting {w}"))?;
            }
            Ok(())
        })
    }

    /// Creates or replaces the scenario's Node: labels, pod CIDRs, InternalIPs.
    pub fn apply_node(&self, name: &str, s: &Scenario) -> Result<()> {
        let n = &s.node;
        let mut spec = json!({});
        if let Some(first) = n.pod_cidrs.first() {
            spec = json!({"podCIDR": first, "podCIDRs": n.pod_cidrs});
        }
        let body = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": n.labels},
            "spec": spec,
        });
        let mut addresses: Vec<serde_json::Value> = s
            .internal_ips()
            .iter()
            .map(|ip| json!({"type": "InternalIP", "address": ip}))
            .collect();
        addresses.push(json!({"type": "Hostname", "address": name}));
        let status =
            json!({"apiVersion": "v1", "kind": "Node", "status": {"addresses": addresses}});
        self.rt.block_on(async {
            let api = self.api("Node", None);
            api.patch(name, &apply_params(), &Patch::Apply(&body))
                .await
                .context("applying the Node")?;
            // A merge patch: server-side apply keys status.addresses by type and refuses two
            // InternalIPs (a dual-stack node's).
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .context("the Node's addresses")?;
            anyhow::Ok(())
        })
    }

    /// Sets (or, with an empty value, removes) labels of the Node.
    pub fn label_node(
        &self,
        name: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<()> {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| {
                let v = if v.is_empty() {
                    serde_json::Value::Null
                } else {
                    v.clone().into()
                };
                (k.clone(), v)
            })
            .collect();
        let patch = json!({"metadata": {"labels": labels}});
        self.rt.block_on(self.api("Node", None).patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ))?;
        Ok(())
    }

    /// The events of the scenarios' namespace about the Service `service` with `reason`, as
    /// `(reportingController, note)`, from either events API (the core one lists both).
    pub fn service_events(&self, service: &str, reason: &str) -> Result<Vec<(String, String)>> {
        let events = self.rt.block_on(
            self.api("Event", Some(NAMESPACE))
                .list(&ListParams::default()),
        )?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| {
                e.data["reason"] == reason
                    && e.data["regarding"]["kind"] == "Service"
                    && e.data["regarding"]["name"] == service
            })
            .map(|e| {
                let field = |k: &str| e.data[k].as_str().unwrap_or_default().to_string();
                (field("reportingController"), field("note"))
            })
            .collect())
    }

    /// Every object of `kind` in every namespace, as JSON.
    pub fn list_all(&self, kind: &str) -> Result<Vec<serde_json::Value>> {
        self.rt.block_on(async {
            let api = self.api(kind, None);
            // A read is safe to repeat: under a loaded lab the API server's connection can
            // close before it answers (a corpus run lost a scenario at its start to that).
            let mut tries = 0;
            let items = loop {
                tries += 1;
                match api.list(&ListParams::default()).await {
                    Ok(list) => break list.items,
                    Err(kube::Error::Api(e)) => return Err(kube::Error::Api(e).into()),
                    Err(e) if tries < 3 => {
                        eprintln!("listing {kind}s: {e}; trying again");
                        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("listing {kind}s, {tries} tries"));
                    }
                }
            };
            items
                .into_iter()
                .map(|o| Ok(serde_json::to_value(o)?))
                .collect()
        })
    }

    /// Deletes every Service and EndpointSlice of the scenarios' namespace and the scenarios'
    /// Nodes (`peers-*`).
    pub fn clear(&self) -> Result<()> {
        use futures::stream::{self, TryStreamExt};
        self.rt.block_on(async {
            for kind in ["Service", "EndpointSlice"] {
                let api = self.api(kind, Some(NAMESPACE));
                let names: Vec<String> = api
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .map(|o| o.metadata.name.unwrap_or_default())
                    .collect();
                // 16 at a time: the soak and the bursts leave thousands.
                let api = &api;
                stream::iter(names.into_iter().map(Ok::<_, anyhow::Error>))
                    .try_for_each_concurrent(16, |name| async move {
                        api.delete(&name, &DeleteParams::default()).await?;
                        Ok(())
                    })
                    .await?;
            }
            let nodes = self.api("Node", None);
            for o in nodes.list(&ListParams::default()).await?.items {
                let name = o.metadata.name.unwrap_or_default();
                if name.starts_with("peers-") {
                    nodes.delete(&name, &DeleteParams::default()).await?;
                }
            }
            anyhow::Ok(())
        })
    }
}
