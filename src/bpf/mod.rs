//! BPF skeletons built by build.rs from the `.bpf.c` files next to this one.

#[allow(
    clippy::all,
    clippy::pedantic,
    non_camel_case_types,
    dead_code,
    unused_imports
)]
pub mod sockdata {
    include!(concat!(env!("OUT_DIR"), "/sockdata.skel.rs"));
}

/// Counter indexes (`enum ebtop_counter` in ebtop.h).
pub mod counter {
    pub const EVENTS: u32 = 0;
    pub const LOST: u32 = 1;
    pub const LOST_BYTES: u32 = 2;
    pub const SKIPPED_UNKNOWN: u32 = 3;
    pub const SKIPPED_BYTES: u32 = 4;
    pub const INFLIGHT_FULL: u32 = 5;
    pub const SOCK_SYSCALLS: u32 = 6;
    pub const TRUNCATED: u32 = 7;
    pub const COUNT: u32 = 8;
}
