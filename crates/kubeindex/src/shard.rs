//! A hash map split into copy-on-write shards: the structural sharing behind snapshots.
//!
//! A [`ShardMap`] is `SHARDS` hash tables, each behind its own `Arc`. Cloning the map (what a
//! publish does) clones `SHARDS` pointers. The writer mutates through [`Arc::make_mut`], so the
//! first write to a shard after a publish copies that one shard (about `len / SHARDS`
//! entries, each a couple of reference-count increments), and later writes in the same batch
//! hit the now-unshared copy. The hash is computed once per operation: its top bits pick the
//! shard, the table uses the whole hash.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, Equivalent, HashTable};

/// Number of shards (a power of two). At 100k entries a shard holds about 400.
const SHARD_BITS: u32 = 8;
const SHARDS: usize = 1 << SHARD_BITS;

type Shard<K, V> = Arc<HashTable<(K, V)>>;

/// A sharded, copy-on-write hash map. See the module doc.
#[derive(Clone)]
pub(crate) struct ShardMap<K, V> {
    hasher: DefaultHashBuilder,
    shards: Box<[Shard<K, V>]>,
    len: usize,
}

impl<K, V> Default for ShardMap<K, V> {
    fn default() -> Self {
        ShardMap {
            hasher: DefaultHashBuilder::default(),
            shards: (0..SHARDS).map(|_| Arc::new(HashTable::new())).collect(),
            len: 0,
        }
    }
}

impl<K, V> std::fmt::Debug for ShardMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMap")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

fn shard_of(hash: u64) -> usize {
    // Top bits: the table itself uses the low bits (bucket) and the top 7 (control byte), so
    // entries of one shard still spread over the table; the shard choice just narrows it.
    (hash >> (64 - SHARD_BITS)) as usize
}

impl<K: Hash + Eq + Clone, V: Clone> ShardMap<K, V> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get<Q>(&self, q: &Q) -> Option<&V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(q);
        self.shards[shard_of(hash)]
            .find(hash, |(k, _)| q.equivalent(k))
            .map(|(_, v)| v)
    }

    /// Inserts or replaces; returns the previous value.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        let hash = self.hasher.hash_one(&key);
        let hasher = &self.hasher;
        let table = Arc::make_mut(&mut self.shards[shard_of(hash)]);
        match table.find_mut(hash, |(k, _)| *k == key) {
            Some(slot) => Some(std::mem::replace(&mut slot.1, value)),
            None => {
                table.insert_unique(hash, (key, value), |(k, _)| hasher.hash_one(k));
                self.len += 1;
                None
            }
        }
    }

    pub(crate) fn remove<Q>(&mut self, q: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let hash = self.hasher.hash_one(q);
        let shard = &mut self.shards[shard_of(hash)];
        shard.find(hash, |(k, _)| q.equivalent(k))?;
        let table = Arc::make_mut(shard);
        let (entry, _) = table
            .find_entry(hash, |(k, _)| q.equivalent(k))
            .ok()?
            .remove();
        self.len -= 1;
        Some(entry.1)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|s| s.iter().map(|(k, v)| (k, v)))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Heap bytes of the tables themselves (not of what the entries point to).
    pub(crate) fn table_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.allocation_size() + std::mem::size_of::<HashTable<(K, V)>>())
            .sum()
    }
}
