//! Scheduler modules that must be loaded before IPVS asks for them.
//!
//! IPVS loads a missing scheduler's module itself (`request_module`) while it holds its global
//! mutex. The `lblc` and `lblcr` modules register per-namespace state when they load, which
//! waits for any network namespace teardown in progress; and a teardown of a namespace that
//! uses IPVS waits for that same mutex. On a node, where pods' namespaces are torn down all the
//! time, the first `lblc` Service can so hang IPVS and every namespace teardown for good
//! (reproduced in `tests/lab/repro/ipvs-module-deadlock.sh`). Loaded beforehand, outside the
//! mutex, the module only waits for the teardown to end.
//!
//! So before the agent first asks IPVS for one of [`LOAD_FIRST`], it loads the module with
//! `modprobe` unless `/sys/module` shows it loaded; when it cannot (no `modprobe`, no
//! `CAP_SYS_MODULE`), it says so once, with the remedy: load them at boot.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use tracing::{info, warn};

/// Schedulers whose module registers per-namespace state when it loads.
pub const LOAD_FIRST: &[&str] = crate::model::desired::scheduler::LOADED_UNDER_LOCK;

/// Whether the module of IPVS scheduler `scheduler` is loaded (or built in): `/sys/module`
/// lists both, `/proc/modules` the loaded ones when `/sys` is not mounted.
pub fn loaded(scheduler: &str) -> bool {
    let module = module_of(scheduler);
    Path::new("/sys/module").join(&module).exists()
        || std::fs::read_to_string("/proc/modules").is_ok_and(|m| listed(&m, &module))
}

/// Whether `/proc/modules` text `modules` lists `module`.
fn listed(modules: &str, module: &str) -> bool {
    modules
        .lines()
        .any(|l| l.split_whitespace().next() == Some(module))
}

/// The kernel module of IPVS scheduler `scheduler`.
fn module_of(scheduler: &str) -> String {
    format!("ip_vs_{scheduler}")
}

/// Loads the modules of [`LOAD_FIRST`] schedulers once per process, before their first use.
#[derive(Debug, Default)]
pub struct Preloader {
    prepared: Mutex<BTreeSet<String>>,
}

impl Preloader {
    /// Makes sure the module of `scheduler` is loaded if it is one of [`LOAD_FIRST`]; logs
    /// what it did (a failure as a warning, once). Never fails: IPVS's own loading stays the
    /// fallback.
    pub async fn prepare(&self, scheduler: &str) {
        let Some(module) = self.claim(scheduler) else {
            return;
        };
        if Path::new("/sys/module").join(&module).exists() {
            return;
        }
        let name = module.clone();
        // modprobe waits for a namespace teardown in progress: off the async threads.
        let out =
            tokio::task::spawn_blocking(move || Command::new("modprobe").arg(&name).output()).await;
        let error = match out {
            Ok(Ok(o)) if o.status.success() => {
                info!(
                    module,
                    "loaded the scheduler's module before IPVS needs it (IPVS would load it under its lock, which can deadlock with a network namespace teardown)"
                );
                return;
            }
            Ok(Ok(o)) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Ok(Err(e)) => format!("cannot run modprobe: {e}"),
            Err(e) => e.to_string(),
        };
        warn!(
            module,
            error,
            "cannot load the scheduler's module: IPVS will load it under its lock, which can deadlock the kernel with a network namespace teardown; load it at boot (modules-load.d)"
        );
    }

    /// The module to load first for `scheduler`, the first time it is asked for one of
    /// [`LOAD_FIRST`]; `None` otherwise.
    fn claim(&self, scheduler: &str) -> Option<String> {
        if !LOAD_FIRST.contains(&scheduler) {
            return None;
        }
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        prepared
            .insert(scheduler.to_string())
            .then(|| module_of(scheduler))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_schedulers_that_register_per_namespace_state_are_loaded_first() {
        let p = Preloader::default();
        for s in [
            "rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq", "mh", "fo", "ovf",
        ] {
            assert_eq!(p.claim(s), None, "{s}");
        }
        assert_eq!(p.claim("lblc").as_deref(), Some("ip_vs_lblc"));
        assert_eq!(p.claim("lblcr").as_deref(), Some("ip_vs_lblcr"));
    }

    #[test]
    fn a_module_is_listed_by_its_whole_name() {
        let text = "ip_vs_lblcr 16384 0 - Live 0x0\nip_vs 184320 2 ip_vs_lblcr, Live 0x0\n";
        assert!(listed(text, "ip_vs_lblcr"));
        assert!(!listed(text, "ip_vs_lblc"));
        assert!(listed(text, "ip_vs"));
    }

    #[test]
    fn each_scheduler_is_prepared_once() {
        let p = Preloader::default();
        assert!(p.claim("lblc").is_some());
        assert_eq!(p.claim("lblc"), None);
        assert!(p.claim("lblcr").is_some());
    }
}
