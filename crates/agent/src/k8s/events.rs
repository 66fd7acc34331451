//! Events the agent records on its Node, as kube-proxy does.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tracing::{debug, warn};

/// The reporting controller named in the agent's events.
pub const CONTROLLER: &str = "kube-proxy-ipvs";

/// Records the `Starting` event on the Node at start (kube-proxy: "Starting kube-proxy."). A
/// failure is logged, never fatal: events are best effort.
pub async fn node_starting(client: kube::Client, node: &str) {
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{node}.")),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some("StartKubeProxy".into()),
        reason: Some("Starting".into()),
        note: Some("Starting kube-proxy-ipvs.".into()),
        type_: Some("Normal".into()),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(format!("{CONTROLLER}-{node}")),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(node.into()),
            ..ObjectReference::default()
        }),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client, "default");
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => debug!(node, "recorded the Starting event"),
        Err(e) => warn!(node, error = %e, "cannot record the Starting event"),
    }
}
