//! Which IPVS scheduler a Service's virtual servers get, and when a Service's own scheduler
//! (its annotation) is refused.
//!
//! Asked for a scheduler it does not hold, IPVS runs `request_module("ip_vs_<name>")` while it
//! holds its global mutex, whatever the name. Whoever may create a Service may set the
//! annotation, so two kinds of names are refused there:
//! - a name that is no IPVS scheduler ([`SCHEDULERS`]): `ftp` loads the FTP application
//!   helper and `nf_nat`, `pe_sip` the SIP persistence engine and `nf_conntrack_sip`, and the
//!   add still fails, leaving the Service unserved;
//! - the schedulers of [`LOADED_UNDER_LOCK`] while their module is not loaded: they register
//!   per-network-namespace state when they load, which waits for any namespace teardown in
//!   progress, while a teardown of a namespace that uses IPVS waits for that mutex, so the
//!   node's IPVS and every namespace teardown can hang for good (`dataplane::modules`,
//!   `tests/lab/repro/ipvs-module-deadlock.sh`), unless the operator allowed them
//!   ([`ProxyConfig::allowed_schedulers`]).
//!
//! A refused Service is served with the node's scheduler (`--ipvs-scheduler`), and a
//! [`Refusal`] says why. The node's own scheduler is the operator's choice and never refused.

use std::fmt;

use crate::model::snapshot::cluster::{Cluster, Service, ServiceRef};
use crate::model::snapshot::config::ProxyConfig;

use crate::model::kernel::SchedulerName;
pub use crate::model::kernel::scheduler_name::SCHEDULERS;

/// Schedulers whose kernel module registers per-network-namespace state when it loads
/// (`register_pernet_subsys` in `ip_vs_lblc.c` and `ip_vs_lblcr.c`; the other schedulers
/// of the kernel's tree register none).
pub const LOADED_UNDER_LOCK: &[&str] = &["lblc", "lblcr"];

/// Why a Service's own scheduler was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    /// The name is none of [`SCHEDULERS`].
    NotAScheduler,
    /// One of [`LOADED_UNDER_LOCK`], its module not loaded and not allowed.
    LoadsUnderLock,
}

impl Why {
    /// The variant's name in kebab-case: a stable machine key for the log, unlike the text.
    pub fn kind(self) -> &'static str {
        match self {
            Why::NotAScheduler => "not-a-scheduler",
            Why::LoadsUnderLock => "loads-under-lock",
        }
    }
}

/// A Service's own scheduler refused, and the one it gets instead.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    /// The Service.
    pub service: ServiceRef,
    /// The scheduler its annotation names (made printable and short by the source).
    pub asked: String,
    /// The scheduler its virtual servers get: the node's.
    pub instead: String,
    /// Why it was refused.
    pub why: Why,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { asked, instead, .. } = self;
        match self.why {
            Why::NotAScheduler => write!(
                f,
                "scheduler {asked:?} from the Service's annotation refused: it is not an IPVS scheduler ({}), and IPVS asked for it would load a kernel module of that name under its lock; using the node's scheduler {instead:?} instead",
                SCHEDULERS.join(", ")
            ),
            Why::LoadsUnderLock => write!(
                f,
                "scheduler {asked:?} from the Service's annotation refused: its module ip_vs_{asked} is not loaded, and IPVS loading it under its lock can hang IPVS and every network namespace teardown on the node; using the node's scheduler {instead:?} instead (load ip_vs_{asked} at boot, or allow it with --ipvs-allowed-schedulers)"
            ),
        }
    }
}

/// The scheduler of `service`'s virtual servers under `config`, and the refusal of its own
/// scheduler when that is what happened.
pub fn resolve(service: &Service, config: &ProxyConfig) -> (SchedulerName, Option<Refusal>) {
    let Some(asked) = service
        .scheduler
        .as_ref()
        .filter(|_| config.scheduler_annotation)
    else {
        return (config.scheduler.as_str().into(), None);
    };
    let why = if *asked == config.scheduler {
        None
    } else if !SCHEDULERS.contains(&asked.as_str()) {
        Some(Why::NotAScheduler)
    } else if LOADED_UNDER_LOCK.contains(&asked.as_str())
        && !config.allowed_schedulers.contains(asked)
    {
        Some(Why::LoadsUnderLock)
    } else {
        None
    };
    match why {
        None => (asked.as_str().into(), None),
        Some(why) => {
            let refusal = Refusal {
                service: service.id.clone(),
                asked: asked.clone(),
                instead: config.scheduler.clone(),
                why,
            };
            (config.scheduler.as_str().into(), Some(refusal))
        }
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
            assert_eq!(refusal.why, Why::LoadsUnderLock);
            assert_eq!(refusal.instead, "wrr");
        }
    }

    #[test]
    fn other_schedulers_and_the_unannotated_pass() {
        let config = ProxyConfig::default();
        for asked in [
            "rr", "wrr", "lc", "wlc", "sh", "dh", "mh", "sed", "nq", "fo", "ovf", "twos",
        ] {
            assert_eq!(
                resolve(&with_scheduler("web", Some(asked)), &config),
                (asked.into(), None)
            );
        }
        assert_eq!(
            resolve(&with_scheduler("web", None), &config),
            ("rr".into(), None)
        );
    }

    #[test]
    fn an_allowed_or_loaded_module_or_the_nodes_own_scheduler_passes() {
        let allowed = ProxyConfig {
            allowed_schedulers: ["lblc".to_string()].into(),
            ..ProxyConfig::default()
        };
        let s = with_scheduler("web", Some("lblc"));
        assert_eq!(resolve(&s, &allowed), ("lblc".into(), None));
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
        assert_eq!(resolve(&s, &node), ("lblcr".into(), None));
    }

    #[test]
    fn without_the_annotation_every_service_gets_the_nodes_scheduler_and_no_refusal() {
        let off = ProxyConfig {
            scheduler: "wlc".into(),
            scheduler_annotation: false,
            ..ProxyConfig::default()
        };
        for asked in ["sh", "lblc", "nonsense"] {
            assert_eq!(
                resolve(&with_scheduler("web", Some(asked)), &off),
                ("wlc".into(), None),
                "{asked}"
            );
        }
    }

    #[test]
    fn names_that_are_no_scheduler_fall_back_to_the_nodes_scheduler_even_when_allowed() {
        // `allowed_schedulers` only ever holds lblc/lblcr, but a name outside SCHEDULERS is
        // refused whatever the configuration says.
        let config = ProxyConfig {
            scheduler: "wlc".into(),
            allowed_schedulers: ["ftp".to_string()].into(),
            ..ProxyConfig::default()
        };
        for asked in [
            "ftp",
            "pe_sip",
            "RR",
            "rr\n-A KUBE-SERVICES",
            "",
            "ip_vs_rr",
        ] {
            let (got, refusal) = resolve(&with_scheduler("web", Some(asked)), &config);
            assert_eq!(got, "wlc", "{asked:?}");
            let refusal = refusal.unwrap_or_else(|| panic!("{asked:?} not refused"));
            assert_eq!(refusal.why, Why::NotAScheduler);
            // The name is the Service author's: the log line stays one line whatever it holds.
            let text = refusal.to_string();
            assert!(!text.contains('\n'), "{text:?}");
        }
        // The node's own scheduler is never refused, whatever its name.
        let node = ProxyConfig {
            scheduler: "mine".into(),
            ..ProxyConfig::default()
        };
        assert_eq!(
            resolve(&with_scheduler("web", Some("mine")), &node),
            ("mine".into(), None)
        );
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
            .map(|r| r.service.name.to_string())
            .collect();
        assert_eq!(names, ["a", "c"]);
    }
}
