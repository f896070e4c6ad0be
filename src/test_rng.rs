//! A seeded xorshift generator for the unit tests' random inputs: the same sequence on every
//! run, so a failing input is found again.

/// Successive 64-bit values from `seed` (which must not be 0).
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// Successive values below the bound each call is given, from `seed` (not 0).
pub(crate) fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut next = xorshift(seed);
    move |n| next() % n
}
