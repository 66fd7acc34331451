//! Events the agent records, as kube-proxy does: `Starting` on its Node, and
//! `FailedToStartServiceHealthcheck` on a Service whose health-check node port cannot be
//! bound; and one of the agent's own, `SchedulerRefused`, on a Service whose scheduler
//! annotation names a scheduler IPVS would load under its lock (`model::desired::scheduler`).
//! They are posted through [`super::event_lane::EventLane`].

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::model::desired::scheduler::Refusal;
use crate::model::snapshot::cluster::ServiceRef;

/// The reporting controller named in the agent's events.
pub const CONTROLLER: &str = "kube-proxy-ipvs";

/// The `Starting` event on the Node at start (kube-proxy: "Starting kube-proxy.").
pub fn node_starting(node: &str) -> Event {
    node_event(
        node,
        ("Normal", "Starting", "StartKubeProxy"),
        "Starting kube-proxy-ipvs.".into(),
    )
}

/// An event on the agent's Node: `(type, reason, action)` and the note.
pub fn node_event(node: &str, what: (&str, &str, &str), note: String) -> Event {
    event(
        node,
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(node.into()),
            ..ObjectReference::default()
        },
        what,
        note,
    )
}

/// The warning on `service` when its health-check node port cannot be bound, with
/// kube-proxy's reason, action and message.
pub fn health_check_failed(node: &str, service: &ServiceRef, port: u16, error: &str) -> Event {
    event(
        node,
        service_reference(service),
        ("Warning", "FailedToStartServiceHealthcheck", "Listen"),
        format!("node {node} failed to start healthcheck \"{service}\" on port {port}: {error}"),
    )
}

/// The warning on a Service whose own scheduler was refused, saying which scheduler it got
/// instead and how the operator can allow it.
pub fn scheduler_refused(node: &str, refusal: &Refusal) -> Event {
    event(
        node,
        service_reference(&refusal.service),
        ("Warning", "SchedulerRefused", "Sync"),
        format!("node {node}: {refusal}"),
    )
}

fn service_reference(service: &ServiceRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        namespace: Some(service.namespace.to_string()),
        name: Some(service.name.to_string()),
        ..ObjectReference::default()
    }
}

/// An event about `regarding`, in its namespace (`default` for cluster-scoped objects).
fn event(
    node: &str,
    regarding: ObjectReference,
    (type_, reason, action): (&str, &str, &str),
    note: String,
) -> Event {
    let namespace = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let name = regarding.name.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    Event {
        metadata: ObjectMeta {
            // client-go's name: the object's, a dot, the time in hex nanoseconds (a
            // generateName ending in a dot is refused: it is no DNS subdomain).
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(action.into()),
        reason: Some(reason.into()),
        note: Some(note),
        type_: Some(type_.into()),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(format!("{CONTROLLER}-{node}")),
        regarding: Some(regarding),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_health_check_event_names_the_service_in_its_namespace() {
        let e = health_check_failed(
            "node-a",
            &ServiceRef::new("prod", "api"),
            32000,
            "Address already in use (os error 98)",
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("prod"));
        let name = e.metadata.name.clone().unwrap();
        let (object, time) = name.split_once('.').unwrap();
        assert_eq!(object, "api");
        assert!(u128::from_str_radix(time, 16).is_ok(), "{name}");
        assert!(e.metadata.generate_name.is_none());
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("FailedToStartServiceHealthcheck"));
        assert_eq!(e.action.as_deref(), Some("Listen"));
        assert_eq!(
            e.note.as_deref(),
            Some(
                "node node-a failed to start healthcheck \"prod/api\" on port 32000: Address already in use (os error 98)"
            )
        );
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Service"), Some("prod"), Some("api"))
        );
        assert_eq!(
            node_starting("node-a").metadata.namespace.as_deref(),
            Some("default")
        );
    }

    #[test]
    fn the_scheduler_refusal_event_says_what_the_service_got_instead() {
        let refusal = Refusal {
            service: ServiceRef::new("shop", "cart"),
            asked: "lblc".into(),
            instead: "rr".into(),
            why: crate::model::desired::scheduler::Why::LoadsUnderLock,
        };
        let e = scheduler_refused("node-a", &refusal);
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("SchedulerRefused"));
        let note = e.note.unwrap();
        // The node, then the refusal as the agent logs it.
        assert_eq!(note, format!("node node-a: {refusal}"));
        assert!(
            note.len() <= 1024,
            "an event's note is at most 1 kB: {note}"
        );
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Service"), Some("shop"), Some("cart"))
        );
    }
}
