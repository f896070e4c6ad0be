//! An HTTP/1 header block: parsed with httparse, its framing (Content-Length, chunked), what a
//! call shows of it (method, resource, status, host), and the head as kept for the details,
//! its secrets redacted.

use super::super::redact;
use super::super::trace_context::TraceParent;
use super::super::{CapturedHead, HeadSecrets, ParseDepth};
use crate::text::lossy_prefix;

const MAX_HEADERS: usize = 128;
/// Longest resource kept per call (bytes); longer ones are cut (memory stays bounded).
const MAX_RESOURCE: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Request,
    Response,
}

/// What a parsed header block says.
pub(super) struct Head {
    pub(super) len: usize,
    /// The head's bytes as kept (`keep_head`), redacted now or when shown.
    pub(super) captured: CapturedHead,
    pub(super) kind: HeadKind,
    pub(super) content_length: Option<u64>,
    pub(super) chunked: bool,
    /// An `Upgrade` header names h2c.
    pub(super) h2c: bool,
}

pub(super) enum HeadKind {
    Request {
        method: String,
        resource: String,
        version: &'static str,
        host: Option<String>,
        /// A valid W3C `traceparent` header (`Full` depth), in its version-00 form.
        traceparent: Option<String>,
    },
    Response {
        status: u16,
        version: &'static str,
    },
}

pub(super) enum HeadParse {
    Complete(Head),
    Partial,
    Invalid,
}

fn version_str(v: Option<u8>) -> &'static str {
    match v {
        Some(0) => "1.0",
        _ => "1.1",
    }
}

/// A request target as shown: its secrets redacted, cut at `MAX_RESOURCE` bytes. httparse
/// has checked the target's text already; it is only read again when something was redacted
/// or cut.
fn request_resource(target: &str) -> String {
    match redact::redact_target(target.as_bytes()) {
        std::borrow::Cow::Borrowed(_) if target.len() <= MAX_RESOURCE => target.to_owned(),
        redacted => lossy_prefix(&redacted, MAX_RESOURCE),
    }
}

/// What a head's headers say that the parser acts on, found in one walk over them.
struct HeaderFacts<'h> {
    content_length: Option<u64>,
    chunked: bool,
    /// The first `Host` header's value.
    host: Option<&'h [u8]>,
    /// The first `traceparent` header's value (W3C Trace Context).
    traceparent: Option<&'h [u8]>,
    /// An `Upgrade` header lists h2c (HTTP/2 over clear text, RFC 7540 §3.2).
    h2c: bool,
}

/// A Content-Length value: digits only (optional whitespace around them), as RFC 9110 §8.6
/// allows; None otherwise or past u64.
fn content_length_value(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// The framing (Content-Length, chunked), host and h2c upgrade of a head; None when its
/// framing headers contradict each other or a length is not a number (damaged). Names are told
/// apart by length first: most headers are none of these four.
fn header_facts<'h>(headers: &[httparse::Header<'h>]) -> Option<HeaderFacts<'h>> {
    let mut facts = HeaderFacts {
        content_length: None,
        chunked: false,
        host: None,
        traceparent: None,
        h2c: false,
    };
    for h in headers {
        match h.name.len() {
            4 if facts.host.is_none() && h.name.eq_ignore_ascii_case("host") => {
                facts.host = Some(h.value);
            }
            11 if facts.traceparent.is_none() && h.name.eq_ignore_ascii_case("traceparent") => {
                facts.traceparent = Some(h.value);
            }
            7 if h.name.eq_ignore_ascii_case("upgrade") => {
                facts.h2c |= h
                    .value
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"h2c"));
            }
            14 if h.name.eq_ignore_ascii_case("content-length") => {
                let v = content_length_value(h.value)?;
                if facts.content_length.is_some_and(|old| old != v) {
                    return None;
                }
                facts.content_length = Some(v);
            }
            17 if h.name.eq_ignore_ascii_case("transfer-encoding") => {
                // Chunked is framing only when it is the final coding.
                facts.chunked = h
                    .value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            _ => {}
        }
    }
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length.
    if facts.chunked {
        facts.content_length = None;
    }
    Some(facts)
}

/// Up to `keep` bytes of a head of `len` bytes. A head that fits is kept as sent, its secrets
/// redacted when shown (`redact_head`). A longer one is redacted whole before it is cut: a cut
/// may fall inside a secret that is only recognised by what follows it (`user:pass@` of a
/// URL needs its `@`).
fn capture_head(buf: &[u8], len: usize, keep: usize) -> CapturedHead {
    if keep == 0 {
        return CapturedHead::default();
    }
    let head = &buf[..len.min(buf.len())];
    if head.len() > keep {
        let mut bytes = redact_head(head);
        bytes.truncate(keep);
        return CapturedHead::redacted(bytes, len as u64);
    }
    CapturedHead {
        bytes: head.to_vec(),
        len: len as u64,
        secrets: HeadSecrets::Http1,
    }
}

/// An HTTP/1 head with its secrets redacted: the request target's, secret headers' values,
/// and those of URLs in any other header's value.
pub fn redact_head(head: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(head.len());
    for (i, line) in head.split_inclusive(|&b| b == b'\n').enumerate() {
        let colon = line.iter().position(|&b| b == b':');
        if i == 0 {
            // The request line: its target's secrets.
            bytes.extend_from_slice(&redact::redact_request_line(line));
        } else if let Some(colon) = colon.filter(|&c| redact::is_secret_header(&line[..c])) {
            bytes.extend_from_slice(&line[..=colon]);
            let value_len = line[colon + 1..].trim_ascii().len();
            bytes.extend_from_slice(format!(" [redacted, {value_len} bytes]\r\n").as_bytes());
        } else {
            // Any other header: the secrets of URLs in its value (Referer, Location,
            // Refresh's url=, …).
            let value_at = colon.map_or(0, |c| c + 1);
            bytes.extend_from_slice(&line[..value_at]);
            bytes.extend_from_slice(&redact::redact_urls_in(&line[value_at..]));
        }
    }
    bytes
}

pub(super) fn parse_head(kind: Kind, buf: &[u8], depth: ParseDepth, keep: usize) -> HeadParse {
    // Left uninitialised: httparse writes the headers it finds, and zeroing 128 of them
    // (4 KiB) was the largest single cost of a parse.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; MAX_HEADERS];
    let config = httparse::ParserConfig::default();
    match kind {
        Kind::Request => {
            let mut req = httparse::Request::new(&mut []);
            match config.parse_request_with_uninit_headers(&mut req, buf, &mut headers) {
                Ok(httparse::Status::Complete(len)) => {
                    let Some(facts) = header_facts(req.headers) else {
                        return HeadParse::Invalid;
                    };
                    let full = depth == ParseDepth::Full;
                    let host = facts.host.filter(|_| full).map(|h| lossy_prefix(h, 256));
                    // Kept only when valid: 55 bytes, never the sender's arbitrary text.
                    let traceparent = facts
                        .traceparent
                        .filter(|_| full)
                        .and_then(TraceParent::parse)
                        .map(|t| t.to_header());
                    HeadParse::Complete(Head {
                        len,
                        captured: capture_head(buf, len, keep),
                        content_length: facts.content_length,
                        chunked: facts.chunked,
                        h2c: facts.h2c,
                        kind: HeadKind::Request {
                            method: req.method.unwrap_or("").to_owned(),
                            resource: request_resource(req.path.unwrap_or("")),
                            version: version_str(req.version),
                            host,
                            traceparent,
                        },
                    })
                }
                Ok(httparse::Status::Partial) => HeadParse::Partial,
                Err(_) => HeadParse::Invalid,
            }
        }
        Kind::Response => {
            let mut resp = httparse::Response::new(&mut []);
            match config.parse_response_with_uninit_headers(&mut resp, buf, &mut headers) {
                Ok(httparse::Status::Complete(len)) => {
                    let Some(facts) = header_facts(resp.headers) else {
                        return HeadParse::Invalid;
                    };
                    HeadParse::Complete(Head {
                        len,
                        captured: capture_head(buf, len, keep),
                        content_length: facts.content_length,
                        chunked: facts.chunked,
                        h2c: facts.h2c,
                        kind: HeadKind::Response {
                            status: resp.code.unwrap_or(0),
                            version: version_str(resp.version),
                        },
                    })
                }
                Ok(httparse::Status::Partial) => HeadParse::Partial,
                Err(_) => HeadParse::Invalid,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_of(head: &str) -> Option<(Option<u64>, bool, Option<String>, bool)> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut req = httparse::Request::new(&mut headers);
        assert!(
            req.parse(head.as_bytes()).unwrap().is_complete(),
            "{head:?}"
        );
        header_facts(req.headers).map(|f| {
            let host = f.host.map(|h| String::from_utf8_lossy(h).into_owned());
            (f.content_length, f.chunked, host, f.h2c)
        })
    }

    #[test]
    fn one_walk_finds_framing_host_and_upgrade() {
        let got = facts_of(
            "POST / HTTP/1.1\r\nhost: a\r\nHost: b\r\nContent-Length:  12 \r\n\
             Upgrade: websocket, H2C\r\n\r\n",
        );
        assert_eq!(got, Some((Some(12), false, Some("a".into()), true)));
        // Transfer-Encoding overrides Content-Length; chunked counts only as the last coding.
        let got = facts_of(
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        );
        assert_eq!(got, Some((None, true, None, false)));
        let got = facts_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(got, Some((None, false, None, false)));
        // Repeated lengths that agree are one length.
        let got = facts_of("POST / HTTP/1.1\r\nContent-Length: 7\r\ncontent-length: 7\r\n\r\n");
        assert_eq!(got, Some((Some(7), false, None, false)));
    }

    #[test]
    fn a_length_that_is_not_digits_or_contradicts_damages_the_head() {
        for value in ["+5", "-1", "", "5 5", "0x10", "18446744073709551616"] {
            let head = format!("POST / HTTP/1.1\r\nContent-Length: {value}\r\n\r\n");
            assert_eq!(facts_of(&head), None, "{value:?}");
        }
        assert_eq!(
            facts_of("POST / HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n"),
            None
        );
        let max = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", u64::MAX);
        assert_eq!(facts_of(&max).unwrap().0, Some(u64::MAX));
    }
}
