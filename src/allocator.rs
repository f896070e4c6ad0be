//! Freed memory handed back to the system where a thread goes quiet after a large working set.
//!
//! ebtop's binary allocates with mimalloc (src/main.rs says why), which returns a thread's
//! freed pages after a delay and only when that thread allocates or frees again. A thread that
//! frees a large working set and then waits would keep it resident for good: the TLS lookout,
//! after reading the symbol tables of every program running (string tables of tens of MB for
//! a compiler's shared library), held 64 MB of RSS at idle (measured; 7.5 MB with the pages
//! returned). Such a thread calls [`release_freed`] before it waits.

// The mimalloc library (linked by this crate) defines the symbol below.
use mimalloc as _;

extern "C" {
    // mimalloc.h: `void mi_collect(bool force)`. Frees what the calling thread's heap holds
    // unused, and with `force` returns it to the system at once.
    fn mi_collect(force: bool);
}

/// Returns the calling thread's freed memory to the system now (a walk of that thread's
/// heap: microseconds; call it when a burst of work is over, not per allocation). Harmless
/// where mimalloc is not the global allocator (the library's tests): its heap is then empty.
pub fn release_freed() {
    // SAFETY: mi_collect has no preconditions; it touches only the calling thread's heap
    // (and segments other threads abandoned), under mimalloc's own synchronisation.
    unsafe { mi_collect(true) }
}
