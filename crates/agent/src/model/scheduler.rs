//! Which IPVS scheduler a Service's virtual servers get, and when a Service's own scheduler
//! (its annotation) is refused.
//!
//! IPVS loads a missing scheduler's module itself while it holds its global mutex. The modules
//! of [`LOADED_UNDER_LOCK`] register per-network-namespace state when they load, which waits
//! for any namespace teardown in progress, while a teardown of a namespace that uses IPVS waits
//! for that mutex: the node's IPVS and every namespace teardown can hang for good
//! (`dataplane::modules`, `tests/lab/repro/ipvs-module-deadlock.sh`). Whoever may create a
//! Service may set the annotation, so such a scheduler is taken from an annotation only when
//! its module is already loaded or the operator allowed it ([`ProxyConfig::allowed_schedulers`]);
//! otherwise the Service gets the node's scheduler (`--ipvs-scheduler`), and a [`Refusal`]
//! says why. The node's own scheduler is the operator's choice and never refused.

use std::fmt;

use super::cluster::{Cluster, Service, ServiceRef};
use super::config::ProxyConfig;

/// Schedulers whose kernel module registers per-network-namespace state when it loads
/// (`register_pernet_subsys` in `ip_vs_lblc.c` and `ip_vs_lblcr.c`; the other schedulers
/// of the kernel's tree register none).
pub const LOADED_UNDER_LOCK: &[&str] = &["lblc", "lblcr"];

/// A Service's own scheduler refused, and the one it gets instead.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    /// The Service.
    pub service: ServiceRef,
    /// The scheduler its annotation names.
    pub asked: String,
    /// The scheduler its virtual servers get: the node's.
    pub instead: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { asked, instead, .. } = self;
        write!(
            f,
            "scheduler {asked:?} from the Service's annotation refused: its module ip_vs_{asked} is not loaded, and IPVS loading it under its lock can hang IPVS and every network namespace teardown on the node; using the node's scheduler {instead:?} instead (load ip_vs_{asked} at boot, or allow it with --ipvs-allowed-schedulers)"
        )
    }
}

/// The scheduler of `service`'s virtual servers under `config`, and the refusal of its own
/// scheduler when that is what happened.
pub fn resolve(service: &Service, config: &ProxyConfig) -> (String, Option<Refusal>) {
    match &service.scheduler {
        None => (config.scheduler.clone(), None),
        Some(asked)
            if LOADED_UNDER_LOCK.contains(&asked.as_str())
                && *asked != config.scheduler
                && !config.allowed_schedulers.contains(asked) =>
        {
            let refusal = Refusal {
                service: service.id.clone(),
                asked: asked.clone(),
                instead: config.scheduler.clone(),
            };
            (config.scheduler.clone(), Some(refusal))
        }
        Some(asked) => (asked.clone(), None),
    }
}

/// Every refusal in `cluster` under `config`, in the Services' order.
pub fn refusals(cluster: &Cluster, config: &ProxyConfig) -> Vec<Refusal> {
    cluster
        .services
        .values()
        .filter_map(|s| resolve(s, config).1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::svc;

    fn with_scheduler(name: &str, scheduler: Option<&str>) -> Service {
        let mut s = svc(name).0;
        s.scheduler = scheduler.map(Into::into);
        s
    }

    #[test]
    fn lblc_and_lblcr_from_an_annotation_fall_back_to_the_nodes_scheduler() {
        let config = ProxyConfig {
            scheduler: "wrr".into(),
            ..ProxyConfig::default()
        };
        for asked in ["lblc", "lblcr"] {
            let (got, refusal) = resolve(&with_scheduler("web", Some(asked)), &config);
            assert_eq!(got, "wrr");
            let refusal = refusal.expect("refused");
            assert_eq!(refusal.asked, asked);
            assert_eq!(refusal.instead, "wrr");
            let text = refusal.to_string();
            assert!(
                text.contains(&format!("ip_vs_{asked} is not loaded")),
                "{text}"
            );
            assert!(text.contains("--ipvs-allowed-schedulers"), "{text}");
        }
    }

    #[test]
    fn other_schedulers_and_the_unannotated_pass() {
        let config = ProxyConfig::default();
        for asked in [
            "rr", "wrr", "lc", "wlc", "sh", "dh", "mh", "sed", "nq", "fo", "ovf",
        ] {
            assert_eq!(
                resolve(&with_scheduler("web", Some(asked)), &config),
                (asked.to_string(), None)
            );
        }
        assert_eq!(
            resolve(&with_scheduler("web", None), &config),
            ("rr".to_string(), None)
        );
    }

    #[test]
    fn an_allowed_or_loaded_module_or_the_nodes_own_scheduler_passes() {
        let allowed = ProxyConfig {
            allowed_schedulers: ["lblc".to_string()].into(),
            ..ProxyConfig::default()
        };
        let s = with_scheduler("web", Some("lblc"));
        assert_eq!(resolve(&s, &allowed), ("lblc".to_string(), None));
        assert!(
            resolve(&with_scheduler("web", Some("lblcr")), &allowed)
                .1
                .is_some()
        );
        // The operator chose lblcr for the node: a Service asking for it asks for nothing new.
        let node = ProxyConfig {
            scheduler: "lblcr".into(),
            ..ProxyConfig::default()
        };
        let s = with_scheduler("web", Some("lblcr"));
        assert_eq!(resolve(&s, &node), ("lblcr".to_string(), None));
    }

    #[test]
    fn refusals_lists_each_refused_service() {
        let mut cluster = Cluster::default();
        for (name, sched) in [("a", Some("lblc")), ("b", None), ("c", Some("lblcr"))] {
            let s = with_scheduler(name, sched);
            cluster.services.insert(s.id.clone(), s.into());
        }
        let names: Vec<_> = refusals(&cluster, &ProxyConfig::default())
            .into_iter()
            .map(|r| r.service.name)
            .collect();
        assert_eq!(names, ["a", "c"]);
    }
}
