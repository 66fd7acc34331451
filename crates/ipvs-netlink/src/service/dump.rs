//! Listing services: `IPVS_CMD_GET_SERVICE` with `NLM_F_DUMP`.

use futures::{Stream, StreamExt, TryStreamExt};

use super::get::service_of;
use super::{Service, ServiceHandle};
use crate::message::{Command, IpvsMessage};
use crate::{Error, Result};

impl ServiceHandle {
    /// Streams every service, in the kernel's (hash table) order (`ipvsadm -Ln`, without
    /// destinations).
    ///
    /// A dump that takes more than one netlink message can repeat or skip a service while
    /// another network namespace adds or deletes services; see
    /// [`ServiceHandle::list_consistent`].
    pub fn dump(&self) -> impl Stream<Item = Result<Service>> + use<> {
        self.handle
            .dump(IpvsMessage::new(Command::GetService, vec![]))
            .map(|m| m.and_then(|m| service_of(&m)))
    }

    /// Collects [`ServiceHandle::dump`].
    pub async fn list(&self) -> Result<Vec<Service>> {
        self.dump().try_collect().await
    }

    /// Lists every service of this network namespace, sorted by key, dumping until two
    /// dumps in a row list the same services (at most `max_dumps` dumps, and at least two).
    ///
    /// The kernel resumes a dump that spans several netlink messages by position, and counts
    /// that position over the services of every network namespace, since they share one
    /// hash table (`ip_vs_genl_dump_services` skips the first `start` entries before it
    /// checks their namespace). A service added in another namespace ahead of the position
    /// makes a [`ServiceHandle::list`] repeat one of ours, and one deleted there makes it
    /// skip one of ours, though nothing changed here. A caller that deletes what is not
    /// listed, or deletes what it thinks is extra, needs this listing. Repeats are dropped.
    ///
    /// Fails with [`Error::Unsettled`] when no two dumps in a row agree; the error carries
    /// every service any dump listed.
    pub async fn list_consistent(&self, max_dumps: usize) -> Result<Vec<Service>> {
        let mut previous: Option<Vec<Service>> = None;
        let mut seen: Vec<Service> = Vec::new();
        let dumps = max_dumps.max(2);
        for _ in 0..dumps {
            let listed = without_repeats(self.list().await?);
            if let Some(previous) = &previous
                && same_keys(previous, &listed)
            {
                return Ok(listed);
            }
            seen.extend(listed.iter().cloned());
            previous = Some(listed);
        }
        Err(Error::Unsettled {
            dumps,
            seen: without_repeats(seen),
        })
    }
}

/// `services` sorted by key, each key once.
fn without_repeats(mut services: Vec<Service>) -> Vec<Service> {
    services.sort_by_key(|s| s.key);
    services.dedup_by_key(|s| s.key);
    services
}

/// True when two sorted listings name the same services.
fn same_keys(a: &[Service], b: &[Service]) -> bool {
    a.iter().map(|s| s.key).eq(b.iter().map(|s| s.key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Scheduler, ServiceKey};

    fn listing(ports: &[u16]) -> Vec<Service> {
        ports
            .iter()
            .map(|p| {
                Service::new(
                    ServiceKey::tcp([10, 0, 0, 1].into(), *p),
                    Scheduler::RoundRobin,
                )
            })
            .collect()
    }

    #[test]
    fn repeats_are_dropped_and_the_listing_sorted() {
        let listed = without_repeats(listing(&[3, 1, 3, 2]));
        assert_eq!(
            listed.iter().map(|s| s.key).collect::<Vec<_>>(),
            listing(&[1, 2, 3])
                .iter()
                .map(|s| s.key)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn listings_agree_on_keys_only() {
        let a = without_repeats(listing(&[1, 2]));
        let mut b = without_repeats(listing(&[2, 1, 1]));
        b[0].timeout = std::time::Duration::from_secs(300);
        assert!(same_keys(&a, &b));
        assert!(!same_keys(&a, &without_repeats(listing(&[1]))));
        assert!(!same_keys(&a, &without_repeats(listing(&[1, 3]))));
    }
}
