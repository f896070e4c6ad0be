//! A small deterministic random number generator for tests and fuzz drivers.

/// xorshift64: deterministic pseudo-random numbers for tests (failures reproduce; no
/// dependency). The seed must not be 0.
pub struct XorShift(pub u64);

impl XorShift {
    // Not an Iterator: an endless stream with no `None` (and the tests' name for it).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
