//! A small deterministic random number generator for tests and fuzz drivers (the same
//! sequence on every run, so a failing input is found again; no dependency).

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

/// Successive values of [`XorShift`] from `seed` (not 0), as a closure.
pub fn sequence(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = XorShift(seed);
    move || rng.next()
}

/// Successive values below the bound each call is given, from `seed` (not 0).
pub fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut next = sequence(seed);
    move |n| next() % n
}
