//! Tests only: packet loss on demand. This kernel has no `sch_netem`, so a live test that
//! needs drops attaches `testdrop.bpf.c` (a tcx ingress program dropping every n-th packet
//! with payload to one port) and compares ebtop's counts with the ones it keeps.

use std::mem::MaybeUninit;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};

use super::testdrop::{TestdropSkel, TestdropSkelBuilder};

/// What the drop program counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedDrops {
    /// Packets with payload to the port seen.
    pub matched: u64,
    pub skbs: u64,
    /// Segments of the dropped skbs (a GSO skb carries several).
    pub segments: u64,
}

/// The drop program, attached to an interface's tcx ingress until dropped.
pub struct DropInjector {
    // Dropped first: the link detaches before the program goes.
    _link: libbpf_rs::Link,
    skel: Box<TestdropSkel<'static>>,
}

impl DropInjector {
    /// Drops every `every`-th IPv4 packet carrying payload to port `port` of protocol
    /// `proto` (6 TCP, 17 UDP) that arrives on interface `ifindex` (of this process's
    /// network namespace).
    pub fn attach(ifindex: u32, proto: u8, port: u16, every: u32) -> Result<DropInjector> {
        let storage = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = TestdropSkelBuilder::default()
            .open(storage)
            .context("opening the test drop program")?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| anyhow!("test drop program without rodata"))?;
        rodata.port = port;
        rodata.proto = proto;
        rodata.every = every;
        let skel = Box::new(open.load().context("loading the test drop program")?);
        let link = super::attach_tcx(&skel.progs.drop_every_nth, ifindex)
            .context("attaching the test drop program")?;
        Ok(DropInjector { _link: link, skel })
    }

    pub fn counts(&self) -> InjectedDrops {
        let bss = self.skel.maps.bss_data.as_deref();
        bss.map_or(
            InjectedDrops {
                matched: 0,
                skbs: 0,
                segments: 0,
            },
            |b| InjectedDrops {
                // SAFETY: the counters are u64s in the program's mmapped .bss, updated
                // atomically by the kernel; a volatile read sees the latest value.
                matched: unsafe { std::ptr::read_volatile(&b.matched) },
                skbs: unsafe { std::ptr::read_volatile(&b.dropped_skbs) },
                segments: unsafe { std::ptr::read_volatile(&b.dropped_segs) },
            },
        )
    }
}
