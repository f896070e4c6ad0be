//! A memo of [`normalize`]: clients ask for the same few resources again and again (keep-alive
//! HTTP paths, prepared SQL texts, a cache's key patterns), and normalising one (segment by
//! segment identifier tests, SQL literal scans) plus the allocation of its result was about a
//! tenth of the pipeline's work per call. A repeated resource is now one hash lookup.
//!
//! Bounded: at [`MEMO_ENTRIES`] the memo starts over. Where resources hardly repeat (a unique
//! id in every URL), a generation that found fewer hits than misses turns the memo off for
//! [`PAUSE_CALLS`] calls, so such traffic pays the plain normalisation plus one failed lookup
//! per generation's worth of calls, not an insert per call.

use std::borrow::Cow;
use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use super::normalize::{normalize, truncated};
use crate::protocols::Protocol;

/// Resources remembered per generation.
pub const MEMO_ENTRIES: usize = 4096;
/// Calls normalised without the memo after a generation of mostly misses.
pub const PAUSE_CALLS: u32 = 64 * 1024;

struct Entry {
    proto: Protocol,
    method: Box<str>,
    resource: Box<str>,
    normalized: Box<str>,
}

pub struct NormalizeMemo {
    table: HashTable<Entry>,
    hasher: DefaultHashBuilder,
    hits: u64,
    misses: u64,
    paused_for: u32,
}

impl Default for NormalizeMemo {
    fn default() -> Self {
        NormalizeMemo {
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            hits: 0,
            misses: 0,
            paused_for: 0,
        }
    }
}

impl NormalizeMemo {
    /// [`normalize`]`(proto, method, resource, keep_raw)`, from the memo when it was seen.
    pub fn normalize<'a>(
        &'a mut self,
        proto: Protocol,
        method: &str,
        resource: &'a str,
        keep_raw: bool,
    ) -> Cow<'a, str> {
        if keep_raw {
            return Cow::Borrowed(truncated(resource));
        }
        if self.paused_for > 0 {
            self.paused_for -= 1;
            return Cow::Owned(normalize(proto, method, resource, false));
        }
        let hash = self.hasher.hash_one((proto, method, resource));
        let found = self.table.find_entry(hash, |e| {
            e.proto == proto && &*e.method == method && &*e.resource == resource
        });
        match found {
            Ok(entry) => {
                self.hits += 1;
                Cow::Borrowed(&entry.into_mut().normalized)
            }
            Err(absent) => {
                let table = absent.into_table();
                self.misses += 1;
                let normalized = normalize(proto, method, resource, false);
                if table.len() >= MEMO_ENTRIES {
                    table.clear();
                    if self.hits < self.misses {
                        self.paused_for = PAUSE_CALLS;
                    }
                    self.hits = 0;
                    self.misses = 0;
                    return Cow::Owned(normalized);
                }
                let hasher = &self.hasher;
                let entry = table.insert_unique(
                    hash,
                    Entry {
                        proto,
                        method: method.into(),
                        resource: resource.into(),
                        normalized: normalized.into_boxed_str(),
                    },
                    |e| hasher.hash_one((e.proto, &*e.method, &*e.resource)),
                );
                Cow::Borrowed(&entry.into_mut().normalized)
            }
        }
    }

    /// Bytes held (keys and results, not the table's slots), for the memory estimate.
    pub fn approx_bytes(&self) -> usize {
        self.table.len() * std::mem::size_of::<Entry>()
            + self
                .table
                .iter()
                .map(|e| e.method.len() + e.resource.len() + e.normalized.len())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(proto: Protocol, method: &str, resource: &str) -> String {
        normalize(proto, method, resource, false)
    }

    #[test]
    fn gives_what_normalize_gives_first_time_and_again() {
        let mut memo = NormalizeMemo::default();
        let cases = [
            (Protocol::Http, "GET", "/users/123?x=1"),
            (Protocol::Http, "CONNECT", "example.com:443"),
            (Protocol::Http, "GET", "example.com:443"),
            (Protocol::Postgres, "QUERY", "SELECT * FROM t WHERE id = 42"),
            (Protocol::Redis, "GET", "user:1234"),
            (Protocol::Redis, "SET", "user:1234"),
            (Protocol::Dns, "A", "PTR 1.0.0.127.in-addr.arpa"),
        ];
        for round in 0..3 {
            for (proto, method, resource) in cases {
                assert_eq!(
                    memo.normalize(proto, method, resource, false),
                    plain(proto, method, resource),
                    "round {round}: {proto:?} {method} {resource}"
                );
            }
        }
        assert_eq!(memo.hits, 2 * cases.len() as u64);
        assert_eq!(memo.misses, cases.len() as u64);
        assert_eq!(memo.normalize(Protocol::Http, "GET", "/a?b", true), "/a?b");
    }

    #[test]
    fn starts_over_when_full_and_pauses_where_resources_do_not_repeat() {
        let mut memo = NormalizeMemo::default();
        // Every resource new: a whole generation of misses.
        for i in 0..=MEMO_ENTRIES {
            let r = format!("/orders/{i}/x{i}");
            assert_eq!(
                memo.normalize(Protocol::Http, "GET", &r, false),
                plain(Protocol::Http, "GET", &r)
            );
        }
        assert_eq!(memo.table.len(), 0, "full: started over");
        assert_eq!(memo.paused_for, PAUSE_CALLS, "mostly misses: paused");
        for _ in 0..PAUSE_CALLS {
            assert_eq!(
                memo.normalize(Protocol::Http, "GET", "/users/7", false),
                "/users/{id}"
            );
        }
        assert_eq!(memo.table.len(), 0, "nothing remembered while paused");
        memo.normalize(Protocol::Http, "GET", "/users/7", false);
        assert_eq!(memo.table.len(), 1, "remembering again after the pause");
        assert!(memo.approx_bytes() > "/users/7/users/{id}GET".len());
    }

    #[test]
    fn a_full_generation_of_mostly_hits_does_not_pause() {
        let mut memo = NormalizeMemo::default();
        for i in 0..MEMO_ENTRIES {
            let r = format!("/p/{i}");
            for _ in 0..3 {
                memo.normalize(Protocol::Http, "GET", &r, false);
            }
        }
        memo.normalize(Protocol::Http, "GET", "/one/more", false);
        assert_eq!(memo.table.len(), 0);
        assert_eq!(memo.paused_for, 0);
    }
}
