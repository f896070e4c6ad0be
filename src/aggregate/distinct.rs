//! Approximate distinct counting (HyperLogLog, 256 one-byte registers: ~6.5% standard error)
//! for keys that were folded away and so cannot be counted exactly without storing them.

use std::hash::{Hash, Hasher};

const P: u32 = 8;
const M: usize = 1 << P;

#[derive(Clone)]
pub struct DistinctCounter {
    registers: Box<[u8; M]>,
}

impl Default for DistinctCounter {
    fn default() -> Self {
        DistinctCounter {
            registers: Box::new([0; M]),
        }
    }
}

impl std::fmt::Debug for DistinctCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DistinctCounter(~{})", self.estimate())
    }
}

/// A 64-bit hash, the same in every run (std's SipHash with fixed keys).
pub fn hash64<T: Hash + ?Sized>(v: &T) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

impl DistinctCounter {
    pub fn insert_hash(&mut self, hash: u64) {
        let idx = (hash >> (64 - P)) as usize;
        let rest = hash << P;
        let rank = (rest.leading_zeros().min(64 - P) + 1) as u8;
        let r = &mut self.registers[idx];
        *r = (*r).max(rank);
    }

    pub fn estimate(&self) -> u64 {
        let m = M as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let sum: f64 = self
            .registers
            .iter()
            .map(|&r| 2f64.powi(-i32::from(r)))
            .sum();
        let raw = alpha * m * m / sum;
        let zeros = self.registers.iter().filter(|&&r| r == 0).count();
        // Small cardinalities: linear counting is far more accurate there.
        let est = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        est.round() as u64
    }

    pub const BYTES: usize = M;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_within_a_few_standard_errors() {
        for n in [0u64, 1, 10, 100, 1000, 20_000, 200_000] {
            let mut d = DistinctCounter::default();
            for i in 0..n {
                // Each value twice: duplicates must not count.
                d.insert_hash(hash64(&i));
                d.insert_hash(hash64(&i));
            }
            let est = d.estimate() as f64;
            let tolerance = (n as f64 * 0.2).max(1.0);
            assert!((est - n as f64).abs() <= tolerance, "n={n} estimate={est}");
        }
    }
}
