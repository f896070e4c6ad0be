//! Enrich plugins: a built-in parser (HTTP/1, Redis) makes the call, a plugin reads its
//! response and may change its outcome, give it a status text and add attributes
//! (docs/plugins.md).
//!
//! [`Enriched`] wraps the built-in parser and keeps the captured bytes of the response since
//! the last call (at most `abi::KEEP`, 16 KiB: the rest is unseen to the plugin, flagged). A call is handed to the plugins only when those
//! bytes are provably its response's alone: the call was the only one its segment completed,
//! in the response's direction, and the bytes moved since the last call are exactly the
//! response's (`resp.bytes`: nothing lost, no interim response, no next response begun).
//! Otherwise the call goes on unchanged and the plugin's `enrich_skipped` counts it. The
//! plugin sees the head with its secrets redacted (`http1::redact_head`), then the body as
//! captured (bytes past the snaplen are unseen to it, flagged truncated). A Redis reply has
//! no head: the plugin sees its bytes (RESP) as captured, head length 0.

use std::sync::atomic::Ordering;

use super::abi::{self, off};
use super::{EnrichProto, Fault, SharedGuest};
use crate::event::Direction;
use crate::protocols::{L7Call, ParseStats, Segment, StreamParser};

pub struct Enriched {
    inner: Box<dyn StreamParser>,
    proto: EnrichProto,
    plugins: Vec<SharedGuest>,
    /// Captured bytes per direction since the last call (bounded).
    bytes: [Vec<u8>; 2],
    /// Bytes moved per direction since the last call, and whether any were not captured.
    moved: [u64; 2],
    unseen: [bool; 2],
    calls: Vec<L7Call>,
    conn_id: u64,
    pid: u32,
}

impl Enriched {
    pub fn new(
        inner: Box<dyn StreamParser>,
        proto: EnrichProto,
        plugins: Vec<SharedGuest>,
        conn_id: u64,
        pid: u32,
    ) -> Enriched {
        Enriched {
            inner,
            proto,
            plugins,
            bytes: [Vec::new(), Vec::new()],
            moved: [0; 2],
            unseen: [false; 2],
            calls: Vec::new(),
            conn_id,
            pid,
        }
    }

    fn restart(&mut self) {
        for d in 0..2 {
            self.bytes[d].clear();
            // An idle connection holds little.
            self.bytes[d].shrink_to(4096);
            self.moved[d] = 0;
            self.unseen[d] = false;
        }
    }

    /// Hands the calls the inner parser just made on, enriched where provably possible.
    fn hand_on(&mut self, seg_dir: Option<Direction>, out: &mut Vec<L7Call>) {
        if self.calls.is_empty() {
            return;
        }
        let alone = self.calls.len() == 1;
        for mut call in self.calls.drain(..) {
            let r = call.request_dir.opposite().index();
            let exact = alone
                && seg_dir.is_none_or(|d| d.index() == r)
                && self.moved[r] == call.resp.bytes
                && !self.bytes[r].is_empty();
            for g in &self.plugins {
                let mut guest = g.lock().unwrap_or_else(|e| e.into_inner());
                if guest.plugin.is_disabled() {
                    continue;
                }
                if !exact {
                    guest
                        .plugin
                        .counters
                        .skipped
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                enrich_one(
                    &mut guest,
                    self.proto,
                    &self.bytes[r],
                    self.unseen[r],
                    self.conn_id,
                    self.pid,
                    r,
                    &mut call,
                );
            }
            out.push(call);
        }
        self.restart();
    }
}

/// Runs one plugin's `ebtop_enrich` on a response and applies its answer.
#[allow(clippy::too_many_arguments)]
fn enrich_one(
    guest: &mut super::Guest,
    proto: EnrichProto,
    resp: &[u8],
    unseen: bool,
    conn_id: u64,
    pid: u32,
    dir: usize,
    call: &mut L7Call,
) {
    let head_end = match proto {
        EnrichProto::Http => memchr::memmem::find(resp, b"\r\n\r\n").map(|i| i + 4),
        // A RESP reply has no head.
        EnrichProto::Redis => Some(0),
    };
    let Some(head_end) = head_end else {
        // The head itself was not all captured: nothing to hand over safely.
        guest
            .plugin
            .counters
            .skipped
            .fetch_add(1, Ordering::Relaxed);
        return;
    };
    let head = match proto {
        EnrichProto::Http => crate::protocols::http1::redact_head(&resp[..head_end]),
        EnrichProto::Redis => Default::default(),
    };
    let body = &resp[head_end..];
    let Some(buf) = guest.buffer() else { return };
    let (hdr, room) = buf.split_at_mut(abi::HEADER_LEN);
    hdr.fill(0);
    hdr[off::ABI..off::ABI + 2].copy_from_slice(&1u16.to_le_bytes());
    hdr[off::HOOK] = abi::HOOK_ENRICH;
    hdr[off::DIR] = dir as u8;
    hdr[off::CONN_ID..off::CONN_ID + 8].copy_from_slice(&conn_id.to_le_bytes());
    hdr[off::PID..off::PID + 4].copy_from_slice(&pid.to_le_bytes());
    hdr[off::TS_NS..off::TS_NS + 8].copy_from_slice(&call.resp.first_start_ns.to_le_bytes());
    hdr[off::MSG_LEN..off::MSG_LEN + 8].copy_from_slice(&call.resp.bytes.to_le_bytes());
    hdr[off::STATUS..off::STATUS + 4].copy_from_slice(&call.status.unwrap_or(0).to_le_bytes());
    let head_len = head.len().min(room.len());
    room[..head_len].copy_from_slice(&head[..head_len]);
    let body_len = body.len().min(room.len() - head_len);
    room[head_len..head_len + body_len].copy_from_slice(&body[..body_len]);
    let n = head_len + body_len;
    let truncated = unseen || n < head.len() + body.len();
    hdr[off::FLAGS] = if truncated { abi::FLAG_TRUNCATED } else { 0 };
    hdr[off::HEAD_LEN..off::HEAD_LEN + 2].copy_from_slice(&(head_len as u16).to_le_bytes());
    hdr[off::INPUT_LEN..off::INPUT_LEN + 4].copy_from_slice(&(n as u32).to_le_bytes());
    let len = match guest.enrich(n) {
        Ok(len) if len > 0 => len,
        Ok(_) | Err(Fault::Disabled | Fault::Trap | Fault::OutOfFuel | Fault::BadAnswer) => {
            return;
        }
    };
    let Ok(a) = guest.answer(len) else { return };
    if let Some(o) = a.outcome {
        call.outcome = o;
    }
    if a.status_text.is_some() {
        call.status_text = a.status_text;
    }
    let name = guest.plugin.name().to_owned();
    for (k, v) in a.attrs {
        if let Some(key) = super::intern_key(&name, &k) {
            call.details.push((key, v));
        }
    }
}

impl StreamParser for Enriched {
    fn on_segment(&mut self, seg: &Segment<'_>, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        let d = seg.dir.index();
        // Only a response's bytes are kept (a request's direction never starts with this),
        // at most `abi::KEEP` of it: the memory an enrich plugin adds per connection. (RESP
        // says no direction at its start: Redis keeps both directions' bytes, each bounded.)
        let take = if self.proto == EnrichProto::Http
            && self.bytes[d].is_empty()
            && !seg.payload.starts_with(b"HTTP/")
        {
            0
        } else {
            seg.payload
                .len()
                .min(abi::KEEP.saturating_sub(self.bytes[d].len()))
        };
        self.bytes[d].extend_from_slice(&seg.payload[..take]);
        self.moved[d] = self.moved[d].saturating_add(seg.total_len);
        // Bytes past the snaplen (a tail included: not contiguous) or past the room.
        self.unseen[d] |= take as u64 != seg.total_len;
        self.inner.on_segment(seg, &mut self.calls, stats);
        self.hand_on(Some(seg.dir), out);
    }

    fn on_gap(&mut self, dir: Direction, len: Option<u64>, stats: &mut ParseStats) {
        // A response with a hole in it is never handed over: make its count miss.
        self.moved[dir.index()] = u64::MAX;
        self.inner.on_gap(dir, len, stats);
    }

    fn on_close(&mut self, out: &mut Vec<L7Call>, stats: &mut ParseStats) {
        self.inner.on_close(&mut self.calls, stats);
        self.hand_on(None, out);
    }
}
