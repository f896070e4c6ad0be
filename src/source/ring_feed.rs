//! One capture ring read by one tracking thread (`--threads` > 1 live): the kernel puts each
//! socket's records in the ring of its shard, and the thread that tracks those sockets reads
//! that ring itself (src/pipeline/fed.rs).

use std::cell::RefCell;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use libbpf_rs::{MapHandle, RingBuffer, RingBufferBuilder};

use crate::pipeline::RecordFeed;

thread_local! {
    /// Where this thread's ring callback appends records: the caller's buffers, swapped in
    /// for the duration of one consume (libbpf's callback cannot borrow them).
    static INTO: RefCell<(Vec<u8>, Vec<u32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

pub struct RingFeed {
    map: MapHandle,
    /// Built on the reading thread at its first read.
    ring: Option<RingBuffer<'static>>,
    /// Records a drain reads at most: a full ring of the smallest records.
    budget: usize,
}

impl RingFeed {
    /// `map`: the ring; `bytes`: its size.
    pub fn new(map: MapHandle, bytes: usize) -> RingFeed {
        RingFeed {
            map,
            ring: None,
            budget: bytes / (crate::event::HEADER_LEN + 8),
        }
    }

    fn ring(&mut self, wake: BorrowedFd) -> io::Result<&RingBuffer<'static>> {
        if self.ring.is_none() {
            let drop_records = super::bench_drops_records();
            let mut b = RingBufferBuilder::new();
            b.add(&self.map, move |data: &[u8]| {
                if drop_records {
                    return 0; // read, not decoded (a benchmark build's cut)
                }
                INTO.with(|into| {
                    let mut into = into.borrow_mut();
                    into.0.extend_from_slice(data);
                    let end = into.0.len() as u32;
                    into.1.push(end);
                });
                0
            })
            .map_err(io::Error::other)?;
            let ring = b.build().map_err(io::Error::other)?;
            // The worker's doorbell wakes it from the ring's wait.
            crate::eventfd::epoll_add(ring.epoll_fd(), wake, u64::MAX)?;
            self.ring = Some(ring);
        }
        Ok(self.ring.as_ref().expect("built above"))
    }
}

impl RecordFeed for RingFeed {
    fn read(
        &mut self,
        wake: BorrowedFd,
        timeout: Duration,
        max: usize,
        buf: &mut Vec<u8>,
        ends: &mut Vec<u32>,
    ) -> io::Result<(usize, u64)> {
        let ring = self.ring(wake)?;
        if !timeout.is_zero() {
            let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
            if let Err(e) = crate::eventfd::epoll_wait(ring.epoll_fd(), ms) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
        let swap = |buf: &mut Vec<u8>, ends: &mut Vec<u32>| {
            INTO.with(|into| {
                let mut into = into.borrow_mut();
                std::mem::swap(&mut into.0, buf);
                std::mem::swap(&mut into.1, ends);
            })
        };
        swap(buf, ends);
        let began = crate::clock::monotonic_ns();
        let rc = ring.consume_raw_n(max);
        swap(buf, ends);
        if rc < 0 && rc != -libc::EINTR {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok((rc.max(0) as usize, began))
    }

    fn drain_budget(&self) -> usize {
        self.budget
    }
}
