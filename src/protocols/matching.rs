//! Request/response pairing strategies shared by protocol parsers.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

/// Pairs in order: the n-th response answers the n-th request (HTTP/1.x, Redis, …).
/// Bounded: when full, the oldest request is dropped and counted as evicted.
#[derive(Debug)]
pub struct InOrder<R> {
    pending: VecDeque<R>,
    cap: usize,
    pub evicted: u64,
}

impl<R> InOrder<R> {
    pub fn new(cap: usize) -> Self {
        InOrder {
            pending: VecDeque::new(),
            cap,
            evicted: 0,
        }
    }
    pub fn push(&mut self, req: R) {
        if self.pending.len() >= self.cap {
            self.pending.pop_front();
            self.evicted += 1;
        }
        self.pending.push_back(req);
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
        self.pending.pop_front()
    }
    /// The most recent request (one still being received may be updated in place).
    pub fn back(&self) -> Option<&R> {
        self.pending.back()
    }
    pub fn back_mut(&mut self) -> Option<&mut R> {
        self.pending.back_mut()
    }
    pub fn pop_back(&mut self) -> Option<R> {
        self.pending.pop_back()
    }
    pub fn len(&self) -> usize {
        self.pending.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
    pub fn drain(&mut self) -> impl Iterator<Item = R> + '_ {
        self.pending.drain(..)
    }
    /// Pending requests, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &R> + '_ {
        self.pending.iter()
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
    fn in_order_pairs_fifo_and_evicts_oldest() {
        let mut q = InOrder::new(2);
        q.push(1);
        q.push(2);
        q.push(3);
        assert_eq!(q.evicted, 1);
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.pop(), None);
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
