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

#[allow(
    clippy::all,
    clippy::pedantic,
    non_camel_case_types,
    dead_code,
    unused_imports
)]
pub mod flows {
    include!(concat!(env!("OUT_DIR"), "/flows.skel.rs"));
}

#[allow(
    clippy::all,
    clippy::pedantic,
    non_camel_case_types,
    dead_code,
    unused_imports
)]
pub mod procs {
    include!(concat!(env!("OUT_DIR"), "/procs.skel.rs"));
}

/// Slot `idx` of a per-CPU array of u64 counters, one value per CPU (empty if unreadable).
pub fn percpu_u64(map: &impl libbpf_rs::MapCore, idx: u32) -> Vec<u64> {
    map.lookup_percpu(&idx.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .map(|v| {
            v.get(..8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
        })
        .collect()
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
