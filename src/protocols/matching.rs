//! Request/response pairing strategies shared by protocol parsers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustc_hash::FxHashMap as HashMap;

/// Memory all connections' pipelines together may hold beyond their own depth
/// ([`InOrder::new`]'s `depth`): a pipeline deeper than its protocol's usual depth draws
/// on it (issue 43: depth follows memory, not a small fixed count), and only when it is spent
/// is a request dropped (counted by the protocol in `ParseStats::pending_dropped`, a `warning`).
pub const SHARED_PENDING_BYTES: usize = 256 << 20;

/// Memory pending requests may hold beyond their connections' own depth, shared by every
/// connection of every tracking thread that uses it.
#[derive(Debug)]
pub struct SharedBudget {
    used: AtomicUsize,
    limit: usize,
}

impl SharedBudget {
    pub const fn new(limit: usize) -> Self {
        SharedBudget {
            used: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `n` bytes, if that many are left.
    fn take(&self, n: usize) -> bool {
        let before = self.used.fetch_add(n, Ordering::Relaxed);
        if before + n > self.limit {
            self.used.fetch_sub(n, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
    }

    fn has(&self, n: usize) -> bool {
        self.used.load(Ordering::Relaxed) + n <= self.limit
    }
}

/// The process's budget of [`SHARED_PENDING_BYTES`].
pub static SHARED_PENDING: SharedBudget = SharedBudget::new(SHARED_PENDING_BYTES);

/// Pairs in order: the n-th response answers the n-th request (HTTP/1.x, Redis, …).
/// Bounded: `depth` requests per connection, more while the shared budget
/// ([`SHARED_PENDING_BYTES`]) lasts; when both are spent, the oldest request is dropped,
/// returned by [`InOrder::push`] and counted as evicted. Its answer comes first: a protocol
/// that keeps pairing after a drop must skip it.
#[derive(Debug)]
pub struct InOrder<R> {
    pending: VecDeque<R>,
    depth: usize,
    /// Entries held beyond `depth`, each [`InOrder::ENTRY_BYTES`] of `shared`.
    borrowed: usize,
    shared: &'static SharedBudget,
    pub evicted: u64,
}

impl<R> InOrder<R> {
    /// What one pending entry is charged: the entry and a share for what it owns on the heap
    /// (names and resources are cut to a bounded length by the parsers).
    const ENTRY_BYTES: usize = std::mem::size_of::<R>() + 64;

    pub fn new(depth: usize) -> Self {
        Self::with_budget(depth, &SHARED_PENDING)
    }

    /// With a budget of its own (tests: the process's is shared by every test).
    pub fn with_budget(depth: usize, shared: &'static SharedBudget) -> Self {
        InOrder {
            pending: VecDeque::new(),
            depth,
            borrowed: 0,
            shared,
            evicted: 0,
        }
    }

    /// Queues `req`, dropping the oldest request (counted in `evicted`) when depth and budget
    /// are spent. A protocol that must skip the dropped one's answer uses [`InOrder::push_or_drop`].
    pub fn push(&mut self, req: R) {
        self.push_or_drop(req);
    }

    /// Queues `req`; returns the oldest request when it had to be dropped to make room.
    pub fn push_or_drop(&mut self, req: R) -> Option<R> {
        if self.pending.len() < self.depth {
            self.pending.push_back(req);
            return None;
        }
        if self.shared.take(Self::ENTRY_BYTES) {
            self.borrowed += 1;
            self.pending.push_back(req);
            return None;
        }
        // Depth and budget both spent: the oldest makes room (the length stays, so does
        // what is borrowed).
        self.evicted += 1;
        let oldest = self.pending.pop_front();
        self.pending.push_back(req);
        oldest
    }

    /// Whether the next [`InOrder::push`] would drop the oldest request: the connection's
    /// depth and the shared budget are both spent.
    pub fn is_full(&self) -> bool {
        self.pending.len() >= self.depth && !self.shared.has(Self::ENTRY_BYTES)
    }

    /// After one entry left: what the queue no longer holds beyond `depth` goes back.
    fn shrunk(&mut self) {
        if self.borrowed > 0 && self.pending.len() < self.depth + self.borrowed {
            self.borrowed -= 1;
            self.shared.give_back(Self::ENTRY_BYTES);
        }
    }

    /// The request the next response answers.
    pub fn front(&self) -> Option<&R> {
        self.pending.front()
    }
    /// The request the next response answers, to be updated in place (a request answered by
    /// several responses, e.g. Redis SUBSCRIBE).
    pub fn front_mut(&mut self) -> Option<&mut R> {
        self.pending.front_mut()
    }
    pub fn pop(&mut self) -> Option<R> {
        let r = self.pending.pop_front();
        self.shrunk();
        r
    }
    /// The most recent request (one still being received may be updated in place).
    pub fn back(&self) -> Option<&R> {
        self.pending.back()
    }
    pub fn back_mut(&mut self) -> Option<&mut R> {
        self.pending.back_mut()
    }
    pub fn pop_back(&mut self) -> Option<R> {
        let r = self.pending.pop_back();
        self.shrunk();
        r
    }
    pub fn len(&self) -> usize {
        self.pending.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
    pub fn drain(&mut self) -> impl Iterator<Item = R> + '_ {
        self.give_back_borrowed();
        self.pending.drain(..)
    }

    fn give_back_borrowed(&mut self) {
        let bytes = std::mem::take(&mut self.borrowed) * Self::ENTRY_BYTES;
        self.shared.give_back(bytes);
    }
    /// Pending requests, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &R> + '_ {
        self.pending.iter()
    }
}

impl<R> Drop for InOrder<R> {
    fn drop(&mut self) {
        self.give_back_borrowed();
    }
}

/// Pairs by an id the protocol carries (DNS transaction id, Kafka correlation id, HTTP/2
/// stream id). Bounded like [`InOrder`]: the oldest pending id is evicted first.
#[derive(Debug)]
pub struct ById<R> {
    pending: HashMap<u64, R>,
    order: VecDeque<u64>,
    cap: usize,
    pub evicted: u64,
}

impl<R> ById<R> {
    pub fn new(cap: usize) -> Self {
        ById {
            pending: HashMap::default(),
            order: VecDeque::new(),
            cap,
            evicted: 0,
        }
    }
    pub fn insert(&mut self, id: u64, req: R) {
        while self.pending.len() >= self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    if self.pending.remove(&old).is_some() {
                        self.evicted += 1;
                    }
                }
                None => break,
            }
        }
        if self.pending.insert(id, req).is_none() {
            self.order.push_back(id);
        }
    }
    pub fn take(&mut self, id: u64) -> Option<R> {
        // `order` keeps stale ids until they reach the front; bounded by cap insertions.
        let r = self.pending.remove(&id);
        if self.order.len() > 2 * self.cap {
            let pending = &self.pending;
            self.order.retain(|k| pending.contains_key(k));
        }
        r
    }
    pub fn len(&self) -> usize {
        self.pending.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
    /// Drops the pending requests `keep` rejects (e.g. timed out); returns how many. O(n).
    pub fn retain(&mut self, mut keep: impl FnMut(&R) -> bool) -> usize {
        let before = self.pending.len();
        self.pending.retain(|_, r| keep(r));
        let pending = &self.pending;
        self.order.retain(|k| pending.contains_key(k));
        before - self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_pairs_fifo_and_evicts_oldest_when_depth_and_budget_are_spent() {
        static NONE: SharedBudget = SharedBudget::new(0);
        let mut q = InOrder::with_budget(2, &NONE);
        assert_eq!(q.push_or_drop(1), None);
        assert_eq!(q.push_or_drop(2), None);
        assert!(q.is_full());
        assert_eq!(q.push_or_drop(3), Some(1));
        assert_eq!(q.evicted, 1);
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.pop(), None);
    }

    /// Deeper than its depth, a queue borrows from the shared budget and gives every byte
    /// back as it shrinks, drains or is dropped; two queues share one budget.
    #[test]
    fn in_order_borrows_beyond_its_depth_and_gives_back() {
        type Q = InOrder<u64>;
        static BUDGET: SharedBudget = SharedBudget::new(5 * Q::ENTRY_BYTES);
        let mut a = Q::with_budget(3, &BUDGET);
        let mut b = Q::with_budget(3, &BUDGET);
        for i in 0..6 {
            assert_eq!(a.push_or_drop(i), None);
        }
        for i in 0..5 {
            assert_eq!(b.push_or_drop(i), None);
        }
        // a borrowed 3, b 2: the budget is spent.
        assert!(a.is_full() && b.is_full());
        assert_eq!(b.push_or_drop(5), Some(0));
        assert_eq!(a.pop(), Some(0));
        assert!(!b.is_full(), "a gave one place back");
        assert_eq!(b.push_or_drop(6), None);
        assert_eq!(b.drain().count(), 6);
        drop(a);
        assert_eq!(BUDGET.used.load(Ordering::Relaxed), 0);
        // In order, whatever was borrowed.
        let mut c = Q::with_budget(1, &BUDGET);
        (10..15).for_each(|i| assert_eq!(c.push_or_drop(i), None));
        assert_eq!(
            c.iter().copied().collect::<Vec<_>>(),
            vec![10, 11, 12, 13, 14]
        );
        while c.pop_back().is_some() {}
        assert_eq!(BUDGET.used.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn by_id_pairs_out_of_order_and_stays_bounded() {
        let mut m = ById::new(3);
        for id in 0..10u64 {
            m.insert(id, id * 10);
        }
        assert_eq!(m.len(), 3);
        assert_eq!(m.evicted, 7);
        assert_eq!(m.take(8), Some(80));
        assert_eq!(m.take(7), Some(70));
        assert_eq!(m.take(0), None);
        for id in 100..1000u64 {
            m.insert(id, 0);
            m.take(id);
        }
        assert!(m.order.len() <= 2 * 3 + 1);
    }
}
