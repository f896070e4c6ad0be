//! The counters each TCP flow had when it was last reported, by socket address: what the next
//! report's interval figures are the difference from, and the flow's id.
//!
//! Held for every flow in the kernel's table (200,000 with 100,000 loopback connections held),
//! so its size is ebtop's memory in that scenario. A hash map of the whole record (104 bytes
//! with its key) was 27.5 MB for 200,000 flows at its 262,144 buckets, and twice that once the
//! churn of short connections had used its headroom up with tombstones: hashbrown then grows to
//! the next power of two (55 MB, with the old table alive during the copy) although the count
//! did not grow. Here the records are [`Prev`]s of [`SLOT_BYTES`] in one dense `Vec` (a slot
//! freed at a flow's end is the next new flow's), and the hash map holds only the address and
//! the slot's index ([`INDEX_BUCKET_BYTES`] a bucket), so its regrowth costs little. When most
//! flows are gone (a mass close), both are rebuilt at the size of what is left
//! ([`PrevTable::shrink_if_sparse`]).

use rustc_hash::FxHashMap;

/// One flow's counters at its last report (as the kernel's `tcp_sock` counts them: u32
/// segment counts, u64 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prev {
    /// The flow's id (low 60 bits) and the bytes `raw_out` and `raw_in` count beyond the
    /// payload (the SYN and FIN sequence numbers: 0 to 2 each, 2 bits each at the top). Ids
    /// count flows from 1: 2^60 is 36 years of a billion new flows a second.
    id_less: u64,
    pub start_ns: u64,
    /// `bytes_acked` and `bytes_received` as read.
    pub raw_out: u64,
    pub raw_in: u64,
    /// The poll that last read the flow in the table (its low 32 bits: compared by
    /// [`seen_since`]).
    pub seen: u32,
    pub segs_out: u32,
    pub segs_in: u32,
    pub retrans: u32,
    pub retrans_events: u32,
    /// `rst_sent + rst_received` (wrapping: only compared for a change).
    pub rst: u32,
}

const ID_BITS: u32 = 60;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

/// What a flow's counters were at its last report, as [`Prev::new`] takes them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub seen: u32,
    pub start_ns: u64,
    pub raw_out: u64,
    pub raw_in: u64,
    /// Payload bytes reported (`payload_bytes`: the raw counts less 0 to 2 each).
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub retrans: u32,
    pub retrans_events: u32,
    pub rst: u32,
}

impl Prev {
    pub fn new(id: u64, c: Counters) -> Prev {
        debug_assert!(id <= ID_MASK);
        let less = |raw: u64, payload: u64| {
            let less = raw.saturating_sub(payload);
            debug_assert!(less <= 2, "{raw} - {payload}");
            less.min(3)
        };
        Prev {
            id_less: (id & ID_MASK)
                | less(c.raw_out, c.bytes_out) << ID_BITS
                | less(c.raw_in, c.bytes_in) << (ID_BITS + 2),
            start_ns: c.start_ns,
            raw_out: c.raw_out,
            raw_in: c.raw_in,
            seen: c.seen,
            segs_out: c.segs_out,
            segs_in: c.segs_in,
            retrans: c.retrans,
            retrans_events: c.retrans_events,
            rst: c.rst,
        }
    }

    pub fn id(&self) -> u64 {
        self.id_less & ID_MASK
    }

    /// Payload bytes out and in as last reported.
    pub fn bytes(&self) -> (u64, u64) {
        let out_less = (self.id_less >> ID_BITS) & 3;
        let in_less = self.id_less >> (ID_BITS + 2);
        (
            self.raw_out.saturating_sub(out_less),
            self.raw_in.saturating_sub(in_less),
        )
    }
}

/// Bytes a slot takes in the dense array.
pub const SLOT_BYTES: usize = std::mem::size_of::<Prev>();

/// Bytes a bucket of the index takes (key, slot, and hashbrown's control byte).
pub const INDEX_BUCKET_BYTES: usize = std::mem::size_of::<(u64, u32)>() + 1;

/// Whether a flow last seen at poll `seen` was seen at or after poll `since`, at poll `now`
/// (the low 32 bits of each: right while `now - since` is under 2^32 polls).
pub fn seen_since(seen: u32, since: u64, now: u64) -> bool {
    (now as u32).wrapping_sub(seen) <= (now as u32).wrapping_sub(since as u32)
}

/// Previous counters by socket address: a dense array of slots with a free list, and an
/// index from the address to the slot.
#[derive(Debug, Default)]
pub struct PrevTable {
    index: FxHashMap<u64, u32>,
    slots: Vec<Prev>,
    /// Slots of flows gone, taken first.
    free: Vec<u32>,
}

impl PrevTable {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn get(&self, sk: u64) -> Option<&Prev> {
        self.index.get(&sk).map(|&i| &self.slots[i as usize])
    }

    pub fn get_mut(&mut self, sk: u64) -> Option<&mut Prev> {
        self.index.get(&sk).map(|&i| &mut self.slots[i as usize])
    }

    pub fn contains_key(&self, sk: u64) -> bool {
        self.index.contains_key(&sk)
    }

    /// Sets the address's counters; the ones it had (another flow's, maybe) come back.
    pub fn insert(&mut self, sk: u64, p: Prev) -> Option<Prev> {
        if let Some(&i) = self.index.get(&sk) {
            return Some(std::mem::replace(&mut self.slots[i as usize], p));
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = p;
                i
            }
            None => {
                self.slots.push(p);
                // u32 slots: 4 billion flows at once, far past any `--max-flows`.
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(sk, i);
        None
    }

    pub fn remove(&mut self, sk: u64) -> Option<Prev> {
        let i = self.index.remove(&sk)?;
        self.free.push(i);
        Some(self.slots[i as usize])
    }

    /// Keeps the flows `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &Prev) -> bool) {
        let (slots, free) = (&self.slots, &mut self.free);
        self.index.retain(|&sk, &mut i| {
            let k = keep(sk, &slots[i as usize]);
            if !k {
                free.push(i);
            }
            k
        });
    }

    /// Rebuilds the array and the index at the size of what is left when at most a quarter
    /// of the slots are used (and they are worth the copy): memory goes back after a mass
    /// close. O(flows), and after one rebuild the next needs the count to fall by 4x again.
    pub fn shrink_if_sparse(&mut self) {
        const MIN_SLOTS: usize = 4096;
        if self.slots.len() < MIN_SLOTS || self.len() > self.slots.len() / 4 {
            return;
        }
        let mut slots = Vec::with_capacity(self.len());
        let mut index = FxHashMap::default();
        index.reserve(self.len());
        for (&sk, &i) in &self.index {
            index.insert(sk, slots.len() as u32);
            slots.push(self.slots[i as usize]);
        }
        self.slots = slots;
        self.index = index;
        self.free = Vec::new();
    }

    /// Bytes allocated (capacity, not use): the array, the free list and the index's buckets.
    pub fn allocated_bytes(&self) -> usize {
        self.slots.capacity() * SLOT_BYTES
            + self.free.capacity() * 4
            + index_buckets(self.index.capacity()) * INDEX_BUCKET_BYTES
    }
}

/// hashbrown's bucket count for a capacity (a power of two, 7/8 full at most; 4 or 8 when
/// small).
fn index_buckets(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        1..=3 => 4,
        4..=7 => 8,
        c => (c * 8 / 7).next_power_of_two(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prev(id: u64) -> Prev {
        Prev::new(
            id,
            Counters {
                seen: 1,
                start_ns: id * 10,
                raw_out: id + 2,
                raw_in: id + 1,
                bytes_out: id,
                bytes_in: id,
                segs_out: 3,
                segs_in: 4,
                ..Default::default()
            },
        )
    }

    /// A held flow's counters take 56 bytes in the array and its index bucket 17 (the hash
    /// map of whole records took 104 + 1 a bucket).
    #[test]
    fn a_slot_is_compact() {
        assert_eq!(SLOT_BYTES, 56);
        assert_eq!(INDEX_BUCKET_BYTES, 17);
        assert_eq!(prev(7).bytes(), (7, 7));
        assert_eq!(prev(7).id(), 7);
        // The largest id a run can reach and every SYN/FIN combination round-trip.
        for (lo, li) in [(0, 0), (1, 2), (2, 1), (2, 2)] {
            let c = Counters {
                raw_out: 100,
                raw_in: 50,
                bytes_out: 100 - lo,
                bytes_in: 50 - li,
                ..Default::default()
            };
            let p = Prev::new(ID_MASK, c);
            assert_eq!((p.id(), p.bytes()), (ID_MASK, (100 - lo, 50 - li)));
        }
    }

    /// 200,000 held flows (100,000 loopback connections) with the churn of short connections
    /// around them (each a new flow and its end, many times the index's headroom): the memory
    /// stays within 17.5 MB, the array never holds more slots than flows at once, and every
    /// flow finds its own counters.
    #[test]
    fn held_flows_with_churn_stay_within_bound() {
        const HELD: u64 = 200_000;
        let mut t = PrevTable::default();
        for sk in 0..HELD {
            assert_eq!(t.insert(sk, prev(sk)), None);
        }
        let mut most = t.allocated_bytes();
        // 100 short flows at a time, 400,000 in all.
        for round in 0..4_000u64 {
            let base = 1_000_000 + round * 100;
            for sk in base..base + 100 {
                t.insert(sk, prev(sk));
            }
            for sk in base..base + 100 {
                assert_eq!(t.remove(sk).map(|p| p.id()), Some(sk));
            }
            most = most.max(t.allocated_bytes());
        }
        assert_eq!(t.len(), HELD as usize);
        assert!(t.slots.len() <= HELD as usize + 100);
        // 262,144 slots (the Vec's doubling) of 56 B and at most 524,288 index buckets.
        assert!(
            most <= 262_144 * SLOT_BYTES + 524_288 * INDEX_BUCKET_BYTES + (1 << 20),
            "{most}"
        );
        assert!(most < 24 << 20, "{most}");
        for sk in (0..HELD).step_by(997) {
            assert_eq!(t.get(sk), Some(&prev(sk)));
        }
    }

    /// After a mass close the table gives its memory back, and what is left is intact.
    #[test]
    fn capacity_shrinks_when_flows_go() {
        let mut t = PrevTable::default();
        for sk in 0..200_000u64 {
            t.insert(sk, prev(sk));
        }
        let full = t.allocated_bytes();
        for sk in 1_000..200_000u64 {
            t.remove(sk);
        }
        t.shrink_if_sparse();
        assert_eq!(t.len(), 1_000);
        assert!(
            t.allocated_bytes() * 50 < full,
            "{} of {full}",
            t.allocated_bytes()
        );
        for sk in 0..1_000u64 {
            assert_eq!(t.get(sk), Some(&prev(sk)));
        }
        // Not sparse: left alone.
        let before = t.allocated_bytes();
        t.shrink_if_sparse();
        assert_eq!(t.allocated_bytes(), before);
        // Slots freed by removal are reused, not appended.
        t.remove(5);
        t.insert(1 << 40, prev(9));
        assert_eq!(t.slots.len(), 1_000);
    }

    #[test]
    fn insert_returns_the_address_earlier_flow_and_retain_frees_slots() {
        let mut t = PrevTable::default();
        assert_eq!(t.insert(1, prev(1)), None);
        assert_eq!(t.insert(1, prev(2)), Some(prev(1)));
        t.insert(2, prev(3));
        t.insert(3, prev(4));
        t.retain(|sk, p| sk != 2 && p.id() != 4);
        assert_eq!(t.len(), 1);
        assert!(t.contains_key(1) && !t.contains_key(2) && !t.contains_key(3));
        t.insert(4, prev(5));
        t.insert(5, prev(6));
        assert_eq!(t.slots.len(), 3);
        t.get_mut(4).unwrap().seen = 9;
        assert_eq!(t.get(4).unwrap().seen, 9);
    }

    /// `seen` keeps the poll's low 32 bits: the comparison holds across the wrap.
    #[test]
    fn seen_since_across_the_wrap() {
        let now = (1u64 << 32) + 5;
        let since = (1u64 << 32) - 3;
        assert!(seen_since(now as u32, since, now));
        assert!(seen_since(since as u32, since, now));
        assert!(seen_since(((1u64 << 32) + 1) as u32, since, now));
        assert!(!seen_since((since - 1) as u32, since, now));
        assert!(seen_since(7, 7, 7));
        assert!(!seen_since(6, 7, 9));
    }
}
