//! Endpoint cardinality: path segments and DNS labels that take too many values fold into
//! [`FOLD`], so a scan of `/missing/page1`, `/missing/page2`, … or lookups of
//! `host1.bad.test`, `host2.bad.test`, … make one row (`/missing/{…}`, `A {…}.bad.test`)
//! instead of one row per call pushing real endpoints into the table's `other` row.
//!
//! The rule: under each parent — (comm, side, protocol, method, DNS type) and the segments
//! before it, already folded — the first [`FOLD_AFTER`] distinct values of the next segment
//! keep their name; any further value folds to `{…}`, for good. URL paths are read from the
//! left (`/a/b/c`: `a` under `/`, `b` under `/a`, …), DNS names from the right (`host42`
//! under `bad.test`). Identifiers that normalisation made `{id}` already count as one value.
//!
//! It runs only when the endpoint table meets a key it has no row for (a call of a known
//! endpoint never gets here), on the pipeline thread in the order calls are applied: the same
//! calls in the same order give the same rows, live or replayed, with any `--threads`.
//!
//! Bounded: segments and parents are kept as 64-bit hashes, at most [`FOLD_AFTER`] per parent
//! and [`MAX_PARENTS`] parents; a segment under a parent new once that many are known folds.

use hashbrown::HashMap;

use super::distinct::{hash64, DistinctCounter};
use crate::call::Side;
use crate::protocols::{Protocol, ResourceKind};

/// What a folded segment or label reads as.
pub const FOLD: &str = "{…}";
/// Distinct values a segment keeps under one parent before further ones fold. 16: more than
/// the sub-resources of a REST collection or the hosts of a domain a service talks to, few
/// enough that a scan folds before it fills the Endpoints view.
pub const FOLD_AFTER: usize = 16;
/// Parents whose values are remembered; past it, segments under a new parent fold.
pub const MAX_PARENTS: usize = 4096;

/// Per parent, the hashes of the values admitted under it.
#[derive(Default)]
pub struct SegmentFolder {
    seen: HashMap<u64, Vec<u64>>,
    /// Distinct keys (before folding) that folded: an estimate, the keys are not kept.
    folded_keys: DistinctCounter,
}

/// The hash of [`FOLD`] as a segment, for the parents below a folded one.
fn fold_hash() -> u64 {
    hash64(FOLD)
}

impl SegmentFolder {
    /// `resource` (normalised) with its too-varied segments folded; None when none folds (the
    /// key stays as it is). Kinds other than URL paths and DNS questions are never folded:
    /// SQL templates, command keys and RPC method names are already bounded by what code
    /// sends, and `--raw-resources` asks for the raw resource.
    pub fn fold(
        &mut self,
        comm: &str,
        side: Side,
        proto: Protocol,
        method: &str,
        resource: &str,
    ) -> Option<String> {
        let kind = proto.resource_kind();
        let out = match kind {
            ResourceKind::UrlPath if method.eq_ignore_ascii_case("CONNECT") => {
                // host:port, one segment.
                let parent = hash64(&(comm, side, proto, method));
                self.admit(parent, resource).0.then(|| FOLD.to_owned())
            }
            ResourceKind::UrlPath => {
                let parent = hash64(&(comm, side, proto, method));
                self.fold_segments(parent, resource.split('/'), "/", false)
            }
            ResourceKind::DnsQuestion => {
                // `TYPE name[ CLASS]`: the type is part of the parent, the name is folded from
                // its right.
                let (ty, rest) = resource.split_once(' ')?;
                let (name, class) = rest.split_once(' ').map_or((rest, ""), |(n, c)| (n, c));
                let parent = hash64(&(comm, side, proto, method, ty, class));
                let name = self.fold_segments(parent, name.rsplit('.'), ".", true)?;
                let mut out = format!("{ty} {name}");
                if !class.is_empty() {
                    out.push(' ');
                    out.push_str(class);
                }
                Some(out)
            }
            ResourceKind::Sql | ResourceKind::Command | ResourceKind::RpcMethod => None,
        };
        if out.is_some() {
            self.folded_keys
                .insert_hash(hash64(&(comm, side, proto, method, resource)));
        }
        out
    }

    /// The segments `segs` (in the order they are read) joined by `sep`, folded where their
    /// parent has seen enough values; None when none folds. `reversed`: `segs` come last first.
    fn fold_segments<'a>(
        &mut self,
        mut parent: u64,
        segs: impl Iterator<Item = &'a str>,
        sep: &str,
        reversed: bool,
    ) -> Option<String> {
        let mut parts: Vec<&str> = Vec::new();
        let mut any = false;
        for seg in segs {
            let (folded, hash) = self.admit(parent, seg);
            any |= folded;
            parts.push(if folded { FOLD } else { seg });
            parent = hash64(&(parent, hash));
        }
        if !any {
            return None;
        }
        if reversed {
            parts.reverse();
        }
        Some(parts.join(sep))
    }

    /// Whether `seg` folds under `parent` (admitting it if there is room), and the hash the
    /// segment takes in its children's parent.
    fn admit(&mut self, parent: u64, seg: &str) -> (bool, u64) {
        // A literal `{…}` is the folded row's own name: it reads as folded and admits nothing.
        if seg == FOLD {
            return (true, fold_hash());
        }
        let h = hash64(seg);
        let full = self.seen.len() >= MAX_PARENTS;
        let values = match self.seen.get_mut(&parent) {
            Some(v) => v,
            None if full => return (true, fold_hash()),
            None => self.seen.entry(parent).or_default(),
        };
        if values.contains(&h) {
            (false, h)
        } else if values.len() < FOLD_AFTER {
            values.push(h);
            (false, h)
        } else {
            (true, fold_hash())
        }
    }

    /// Distinct keys folded so far (estimate, ~6.5% error).
    pub fn folded_keys_approx(&self) -> u64 {
        self.folded_keys.estimate()
    }

    /// Heap bytes held.
    pub fn approx_bytes(&self) -> usize {
        self.seen.capacity() * std::mem::size_of::<(u64, Vec<u64>)>()
            + self.seen.values().map(|v| v.capacity() * 8).sum::<usize>()
            + DistinctCounter::BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(f: &mut SegmentFolder, path: &str) -> String {
        f.fold("srv", Side::Server, Protocol::Http, "GET", path)
            .unwrap_or_else(|| path.to_owned())
    }

    #[test]
    fn the_first_values_keep_their_names_then_they_fold_for_good() {
        let mut f = SegmentFolder::default();
        for i in 0..FOLD_AFTER {
            let p = format!("/missing/page{i}");
            assert_eq!(http(&mut f, &p), p);
        }
        for i in FOLD_AFTER..FOLD_AFTER + 50 {
            assert_eq!(http(&mut f, &format!("/missing/page{i}")), "/missing/{…}");
        }
        // Admitted values stay admitted; other parents are not affected.
        assert_eq!(http(&mut f, "/missing/page3"), "/missing/page3");
        assert_eq!(http(&mut f, "/users/{id}"), "/users/{id}");
        // Deeper segments are counted under the folded parent.
        assert_eq!(http(&mut f, "/missing/x99/edit"), "/missing/{…}/edit");
        assert!(f.folded_keys_approx() > 40, "{}", f.folded_keys_approx());
    }

    #[test]
    fn parents_are_per_method_and_process() {
        let mut f = SegmentFolder::default();
        for i in 0..FOLD_AFTER {
            http(&mut f, &format!("/p/{i}x"));
        }
        assert_eq!(http(&mut f, "/p/newx"), "/p/{…}");
        assert_eq!(
            f.fold("srv", Side::Server, Protocol::Http, "POST", "/p/newx"),
            None
        );
        assert_eq!(
            f.fold("other", Side::Server, Protocol::Http, "GET", "/p/newx"),
            None
        );
    }

    #[test]
    fn dns_names_fold_from_the_left_under_their_domain() {
        let mut f = SegmentFolder::default();
        let mut dns = |r: &str| {
            f.fold("resolver", Side::Client, Protocol::Dns, "QUERY", r)
                .unwrap_or_else(|| r.to_owned())
        };
        for i in 0..FOLD_AFTER {
            let r = format!("A host{i}.bad.test");
            assert_eq!(dns(&r), r);
        }
        assert_eq!(dns("A host99.bad.test"), "A {…}.bad.test");
        assert_eq!(dns("A x.host99.bad.test"), "A x.{…}.bad.test");
        assert_eq!(dns("TXT host99.bad.test CH"), "TXT host99.bad.test CH");
        // Another type is another parent.
        assert_eq!(dns("AAAA host99.bad.test"), "AAAA host99.bad.test");
        assert_eq!(dns("A example.com"), "A example.com");
    }

    #[test]
    fn other_kinds_are_never_folded() {
        let mut f = SegmentFolder::default();
        for i in 0..100 {
            let sql = format!("SELECT * FROM t{i}");
            assert_eq!(
                f.fold("db", Side::Server, Protocol::Postgres, "QUERY", &sql),
                None
            );
        }
    }

    #[test]
    fn parents_are_bounded_and_new_ones_fold_past_the_bound() {
        let mut f = SegmentFolder::default();
        // Each path makes new parents (`/a{i}` and its child's): the map stops at the bound.
        for i in 0..MAX_PARENTS {
            f.fold("c", Side::Server, Protocol::Http, &format!("M{i}"), "/x/y");
        }
        assert!(f.seen.len() <= MAX_PARENTS);
        assert_eq!(
            f.fold("c", Side::Server, Protocol::Http, "NEW", "/x"),
            Some("{…}/{…}".to_owned())
        );
        assert!(f.approx_bytes() < MAX_PARENTS * (FOLD_AFTER * 8 + 64) * 2);
    }
}
