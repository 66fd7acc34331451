//! Listing services: `IPVS_CMD_GET_SERVICE` with `NLM_F_DUMP`.

use std::collections::BTreeMap;

use futures::{Stream, StreamExt, TryStreamExt};

use super::get::service_of;
use super::{Service, ServiceHandle, ServiceKey};
use crate::message::{Command, IpvsMessage};
use crate::{Error, Result};

impl ServiceHandle {
    /// Streams every service, in the kernel's (hash table) order (`ipvsadm -Ln`, without
    /// destinations), on a socket of its own and read as the stream is consumed: a listing
    /// of thousands of services is never held whole unless its consumer keeps it. Listings
    /// on one connection take turns: another waits until this stream ends or is dropped (the
    /// kernel runs one dump per socket), so do not start one while holding this stream.
    ///
    /// A dump that takes more than one netlink message can repeat or skip a service while
    /// another network namespace adds or deletes services; see
    /// [`ServiceHandle::list_consistent`].
    pub fn dump(&self) -> impl Stream<Item = Result<Service>> + use<> {
        self.handle
            .dump_paced(IpvsMessage::new(Command::GetService, vec![]))
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
        let listing = self
            .list_consistent_with(max_dumps, |service| service)
            .await?;
        let services = listing.services.into_values().collect();
        if listing.settled {
            Ok(services)
        } else {
            Err(Error::Unsettled {
                dumps: listing.dumps,
                seen: services,
            })
        }
    }

    /// [`ServiceHandle::list_consistent`], each service kept as `keep` makes it while the
    /// dumps come in: a caller that needs a few of a service's fields holds those alone.
    /// When no two dumps in a row agree, the listing says so (`settled` false) and holds
    /// every service any dump listed, instead of failing.
    pub async fn list_consistent_with<T>(
        &self,
        max_dumps: usize,
        mut keep: impl FnMut(Service) -> T,
    ) -> Result<Listing<T>> {
        let dumps = max_dumps.max(2);
        let mut found = Dumps::default();
        for dump in 1..=dumps {
            let mut listed = std::pin::pin!(self.dump());
            while let Some(service) = listed.try_next().await? {
                found.add(service.key, keep(service));
            }
            if found.end_dump() {
                return Ok(found.settled(dump));
            }
        }
        Ok(Listing {
            services: found.seen,
            dumps,
            settled: false,
        })
    }
}

/// What [`ServiceHandle::list_consistent_with`] listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<T> {
    /// Each service once, by key, as the caller kept it: those the last two dumps listed,
    /// as the last one saw them; unsettled, every service any dump listed.
    pub services: BTreeMap<ServiceKey, T>,
    /// How many dumps were made.
    pub dumps: usize,
    /// Whether two dumps in a row listed the same services.
    pub settled: bool,
}

/// What the dumps of a consistent listing found, taken in as they come: each service once, as
/// the latest dump that listed it saw it, and the keys of the last two dumps. About one
/// listing is held whatever the number of dumps (a list per dump, and a copy of each for the
/// union, held three listings of 300-byte services at once: 13 MiB at 12,000).
struct Dumps<T> {
    /// Every service any dump listed, each as the latest dump that listed it saw it.
    seen: BTreeMap<ServiceKey, T>,
    /// The keys the dump under way listed so far, in its order, repeats included.
    listing: Vec<ServiceKey>,
    /// The keys the last dump that ended listed, sorted, each once.
    last: Option<Vec<ServiceKey>>,
}

impl<T> Default for Dumps<T> {
    fn default() -> Self {
        Dumps {
            seen: BTreeMap::new(),
            listing: Vec::new(),
            last: None,
        }
    }
}

impl<T> Dumps<T> {
    /// Takes in a service the dump under way listed.
    fn add(&mut self, key: ServiceKey, service: T) {
        self.listing.push(key);
        self.seen.insert(key, service);
    }

    /// Ends the dump under way; true when it listed the services the dump before it listed.
    fn end_dump(&mut self) -> bool {
        let mut keys = std::mem::take(&mut self.listing);
        keys.sort_unstable();
        keys.dedup();
        let agreed = self.last.as_ref() == Some(&keys);
        self.listing = Vec::with_capacity(keys.len());
        self.last = Some(keys);
        agreed
    }

    /// The listing once the last two of `dumps` dumps agreed: the services the last one
    /// listed, as it saw them (those only earlier dumps listed are dropped in place).
    fn settled(mut self, dumps: usize) -> Listing<T> {
        let keys = self.last.unwrap_or_default();
        self.seen.retain(|key, _| keys.binary_search(key).is_ok());
        Listing {
            services: self.seen,
            dumps,
            settled: true,
        }
    }
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

    fn keys(services: &[Service]) -> Vec<u16> {
        let port = |s: &Service| match s.key {
            ServiceKey::Inet { port, .. } => port,
            ServiceKey::Fwmark { .. } => 0,
        };
        services.iter().map(port).collect()
    }

    /// Takes in one dump of `listed`; true when it agreed with the one before.
    fn dump(found: &mut Dumps<Service>, listed: Vec<Service>) -> bool {
        listed.into_iter().for_each(|s| found.add(s.key, s));
        found.end_dump()
    }

    fn listed(found: Dumps<Service>) -> Vec<Service> {
        found.settled(2).services.into_values().collect()
    }

    #[test]
    fn repeats_are_dropped_and_the_listing_sorted() {
        let mut found = Dumps::default();
        assert!(
            !dump(&mut found, listing(&[3, 1, 3, 2])),
            "a first dump agrees with none"
        );
        assert!(dump(&mut found, listing(&[2, 1, 3])));
        assert_eq!(keys(&listed(found)), [1, 2, 3]);
    }

    #[test]
    fn dumps_agree_on_keys_and_the_last_ones_services_are_listed() {
        let mut found = Dumps::default();
        dump(&mut found, listing(&[1, 2]));
        let mut second = listing(&[2, 1, 1]);
        second[0].timeout = std::time::Duration::from_secs(300);
        assert!(dump(&mut found, second), "the same keys, a service changed");
        let listed = listed(found);
        assert_eq!(keys(&listed), [1, 2]);
        assert_eq!(listed[1].timeout, std::time::Duration::from_secs(300));
    }

    #[test]
    fn a_service_an_earlier_dump_alone_listed_is_seen_but_not_listed() {
        let mut found = Dumps::default();
        assert!(!dump(&mut found, listing(&[1, 2, 9])));
        assert!(!dump(&mut found, listing(&[1, 2])), "9 skipped, or gone");
        assert!(!dump(&mut found, listing(&[1, 2, 3])));
        let mut settled = Dumps::default();
        for ports in [&[1, 2, 9][..], &[1, 2], &[2, 1]] {
            dump(&mut settled, listing(ports));
        }
        assert_eq!(keys(&listed(settled)), [1, 2]);
        let seen: Vec<Service> = found.seen.into_values().collect();
        assert_eq!(keys(&seen), [1, 2, 3, 9], "every dump's, each once");
    }
}
