//! A small ordered map kept as a sorted vector: what a virtual server's real servers and their
//! connection counts are held in. A virtual server has a handful of real servers, and the
//! agent holds tens of thousands of virtual servers in each copy of the state; a B-tree node
//! per virtual server (11 slots for 5 entries) cost twice the memory of the entries themselves.
//! Lookups are binary searches; inserting and removing move the entries after the slot, which
//! is cheap at these sizes.

use std::fmt;

/// Up to this many entries, [`SortedMap::insert`] grows the vector by one slot (a cold sync's
/// shadow gets its real servers one at a time, and doubling left 8 slots for 5).
const EXACT_UP_TO: usize = 16;

/// An ordered map over a sorted vector of `(key, value)`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SortedMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> SortedMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    fn find(&self, key: &K) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// Whether `key` is here.
    pub fn contains_key(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    /// Sets the value of `key`; returns the value it had.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                if self.0.len() == self.0.capacity() && self.0.len() < EXACT_UP_TO {
                    self.0.reserve_exact(1);
                }
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// The value of `key`, put in as `V::default()` when missing.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (key, V::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.0.clear();
        self.0.shrink_to_fit();
    }

    /// The entries, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values, in the keys' order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for SortedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SortedMap<K, V> {
    /// As a map collects: a repeated key keeps the last value.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut v: Vec<(K, V)> = iter.into_iter().collect();
        // Stable, so that of equal keys the last one is last.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(v.len());
        for e in v {
            match out.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => out.push(e),
            }
        }
        Self(out)
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for SortedMap<K, V> {
    fn from(entries: [(K, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<'a, K, V> IntoIterator for &'a SortedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_an_ordered_map_whatever_the_order_of_insertion() {
        let mut a = SortedMap::new();
        for k in [30, 10, 20] {
            assert_eq!(a.insert(k, 1), None);
        }
        assert_eq!(a.0.capacity(), 3, "a few entries take no spare slot");
        assert_eq!(a.insert(20, 0), Some(1), "a second insert replaces");
        let b: SortedMap<u16, u32> = [(10, 1), (20, 7), (30, 1), (20, 0)].into();
        assert_eq!(a, b, "collecting keeps the last value of a repeated key");
        assert_eq!(a.keys().copied().collect::<Vec<_>>(), [10, 20, 30]);
        assert_eq!(a.values().copied().collect::<Vec<_>>(), [1, 0, 1]);
        assert_eq!(a.get(&20), Some(&0));
        assert!(!a.contains_key(&40));
        *a.get_or_default(40) += 5;
        *a.get_or_default(40) += 1;
        assert_eq!(a.get(&40), Some(&6));
        assert_eq!(a.remove(&10), Some(1));
        assert_eq!(a.remove(&10), None);
        assert_eq!(
            (&a).into_iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            [(20, 0), (30, 1), (40, 6)]
        );
        assert_eq!(a.len(), 3);
        assert_eq!(format!("{a:?}"), "{20: 0, 30: 1, 40: 6}");
        a.clear();
        assert!(a.is_empty());
    }
}
