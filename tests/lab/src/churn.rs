//! Another network namespace adding and clearing IPVS services, over and over.
//!
//! IPVS resumes a service dump that spans several netlink messages by a position it counts
//! over the services of every network namespace, so this churn makes a long dump in any other
//! namespace repeat or skip entries (as nodes sharing one kernel do to each other: kind, test
//! rigs). Tests use it to show that a reader copes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::guest::{Netns, sh};

/// The churn, running on a thread of its own until stopped or dropped.
pub struct IpvsChurn {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u32>>,
}

impl IpvsChurn {
    /// Starts restoring `services` TCP services on 10.98.x.y:80 and clearing them, in a fresh
    /// namespace, pausing (between rounds) while `pause` says so.
    pub fn start(services: u32, pause: fn() -> bool) -> IpvsChurn {
        let rules = std::env::temp_dir().join(format!(
            "ipvs-churn-{}-{services}.rules",
            std::process::id()
        ));
        let text: String = (0..services)
            .map(|i| format!("-A -t 10.98.{}.{}:80 -s rr\n", i / 250, i % 250 + 1))
            .collect();
        std::fs::write(&rules, text).expect("write the churn's rules");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _ns = Netns::fresh();
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) {
                    if pause() {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    sh(&format!("ipvsadm -R < {} && ipvsadm -C", rules.display()));
                    rounds += 1;
                }
                rounds
            })
        };
        IpvsChurn {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the churn; how many rounds (a restore and a clear) it made.
    pub fn stop(mut self) -> u32 {
        self.halt()
    }

    fn halt(&mut self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or(0))
            .unwrap_or(0)
    }
}

impl Drop for IpvsChurn {
    fn drop(&mut self) {
        self.halt();
    }
}
