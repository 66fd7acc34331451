//! The periodic full sync reads the kernel in shares: every virtual server, set, address and
//! rule each time, but the real servers of only one share of the virtual servers, in turn.
//!
//! Reading real servers is one dump per virtual server, most of a full read at scale (about
//! 9 s for 11,200 virtual servers under the lab's emulation), and a sync that reads holds up
//! the endpoint changes behind it. A share is small enough that a change waits for a fraction
//! of that, and every real server is still read again within `shares` periods. Real servers
//! that drain are read at every pass (their connection counts decide when they go).

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use crate::model::kernel::VsKey;

/// Virtual servers whose real servers one periodic pass reads, at most (beside the draining
/// ones): below this many, every pass reads everything.
pub const READ_SHARE: usize = 2048;

/// Which virtual servers' real servers one pass reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// How many shares the virtual servers are split into.
    pub shares: u64,
    /// The share this pass reads, `0..shares`.
    pub share: u64,
    /// Virtual servers read whatever their share (those with draining real servers).
    pub always: BTreeSet<VsKey>,
}

impl Part {
    /// The part of pass number `pass` over `services` virtual servers, read `per_share` at a
    /// time; `None` when one pass reads them all.
    pub fn of_pass(
        pass: u64,
        services: usize,
        per_share: usize,
        always: BTreeSet<VsKey>,
    ) -> Option<Part> {
        if services <= per_share.max(1) {
            return None;
        }
        let shares = services.div_ceil(per_share.max(1)) as u64;
        Some(Part {
            shares,
            share: pass % shares,
            always,
        })
    }

    /// Whether this pass reads the real servers of `key`.
    pub fn reads(&self, key: &VsKey) -> bool {
        self.always.contains(key) || share_of(key, self.shares) == self.share
    }
}

/// The share `key` belongs to: a hash that does not change between passes or restarts.
fn share_of(key: &VsKey, shares: u64) -> u64 {
    // SipHash with fixed keys: the same key lands in the same share in every pass.
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() % shares.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::cluster::Protocol;

    fn key(i: u32) -> VsKey {
        VsKey {
            address: std::net::Ipv4Addr::from(0x0a60_0000 + i).into(),
            protocol: Protocol::Tcp,
            port: 80,
        }
    }

    #[test]
    fn few_virtual_servers_are_read_whole() {
        assert_eq!(Part::of_pass(7, 2048, 2048, BTreeSet::new()), None);
        assert!(Part::of_pass(7, 2049, 2048, BTreeSet::new()).is_some());
    }

    #[test]
    fn the_passes_of_one_round_read_every_virtual_server_once() {
        let keys: Vec<VsKey> = (0..10_000).map(key).collect();
        let shares = Part::of_pass(0, keys.len(), 2048, BTreeSet::new())
            .unwrap()
            .shares;
        assert_eq!(shares, 5);
        let mut read = vec![0u32; keys.len()];
        for pass in 0..shares {
            let part = Part::of_pass(pass, keys.len(), 2048, BTreeSet::new()).unwrap();
            let n = keys.iter().filter(|k| part.reads(k)).count();
            // A share is about a fifth: never far from it.
            assert!((1500..2500).contains(&n), "pass {pass} reads {n}");
            for (i, k) in keys.iter().enumerate() {
                read[i] += u32::from(part.reads(k));
            }
        }
        assert!(read.iter().all(|&r| r == 1));
        // The next round starts again with the first share.
        let again = Part::of_pass(shares, keys.len(), 2048, BTreeSet::new()).unwrap();
        assert_eq!(again.share, 0);
    }

    #[test]
    fn draining_virtual_servers_are_read_at_every_pass() {
        let always = BTreeSet::from([key(3)]);
        for pass in 0..5 {
            let part = Part::of_pass(pass, 10_000, 2048, always.clone()).unwrap();
            assert!(part.reads(&key(3)));
        }
    }
}
