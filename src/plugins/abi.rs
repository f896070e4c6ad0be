//! ABI version 1 between ebtop and a plugin (docs/plugins.md is its reference): the fixed
//! input header the host writes at the start of the guest's buffer, the return codes of
//! `ebtop_frame`, and the answer a guest writes back into the same buffer, decoded here with
//! every length checked (the guest is untrusted: a bad answer is a fault, never a panic).

use crate::protocols::outcome::Outcome;

/// The guest's buffer: the host writes a header and bytes into it, the guest its answer.
pub const BUFFER_LEN: usize = 64 * 1024;
/// The input header's length; the bytes follow it.
pub const HEADER_LEN: usize = 96;
/// Bytes of a message the host writes after the header at most (the rest is unseen to the
/// guest, as bytes beyond the snaplen are).
pub const MAX_INPUT: usize = BUFFER_LEN - HEADER_LEN;
/// Bytes of a message ebtop keeps for a guest per connection and direction (a parse plugin's
/// body prefix, an enriched response): what bounds the memory plugins add per connection.
pub const KEEP: usize = 16 * 1024;

/// `hook` values in the header.
pub const HOOK_FRAME: u8 = 1;
pub const HOOK_MESSAGE: u8 = 2;
pub const HOOK_ENRICH: u8 = 3;

/// Header `flags`.
/// Bytes of the message were not captured (beyond the snaplen, or lost): the input is a
/// prefix (or, for enrich, the captured part) of `msg_len` bytes.
pub const FLAG_TRUNCATED: u8 = 1;
/// (`ebtop_message`, `transport=udp` plugins) The input is one whole datagram, the header's
/// peer its sender or receiver. Bit 2 is `protocols::plugin::FLAG_LINE` (frame calls).
pub const FLAG_DATAGRAM: u8 = 4;

/// Field offsets in the input header (little-endian).
pub mod off {
    pub const ABI: usize = 0; // u16
    pub const HOOK: usize = 2; // u8
    pub const DIR: usize = 3; // u8: 0 sent by the traced process, 1 received
    pub const FLAGS: usize = 4; // u8
    pub const FAMILY: usize = 5; // u8: 4 or 6
    pub const HEAD_LEN: usize = 6; // u16: enrich: the input's first bytes that are the head
    pub const CONN_ID: usize = 8; // u64
    pub const MSG_LEN: usize = 16; // u64
    pub const INPUT_LEN: usize = 24; // u32
    pub const PID: usize = 28; // u32
    pub const TS_NS: usize = 32; // u64
    pub const LOCAL_PORT: usize = 40; // u16
    pub const PEER_PORT: usize = 42; // u16
    pub const COMM: usize = 44; // [u8; 16]
    pub const STATUS: usize = 60; // u32: enrich: the built-in call's status (0: none)
    pub const LOCAL_IP: usize = 64; // [u8; 16], IPv4-mapped for IPv4
    pub const PEER_IP: usize = 80; // [u8; 16]
}

/// `ebtop_frame`'s answer (an i64): negative, not a message of this protocol; below
/// [`FRAME_NEED`], a frame whose body (after the header) is that many bytes; `FRAME_NEED | n`,
/// the header is `n` bytes in all (at most `framing::MAX_HEADER`); `FRAME_LINE | max`, the
/// header is a line up to its `\n`, at most `max` bytes.
pub const FRAME_NEED: i64 = 1 << 56;
pub const FRAME_LINE: i64 = 2 << 56;
/// The largest body a frame may announce.
pub const MAX_BODY: i64 = (1 << 48) - 1;
/// The longest line header.
pub const MAX_LINE: i64 = 64 * 1024;

/// What `ebtop_frame` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameAnswer {
    NotAFrame,
    Body(u64),
    NeedHeader(usize),
    Line(usize),
    /// Out of the ABI's range: a fault.
    Invalid,
}

pub fn frame_answer(r: i64, max_header: usize) -> FrameAnswer {
    if r < 0 {
        FrameAnswer::NotAFrame
    } else if r <= MAX_BODY {
        FrameAnswer::Body(r as u64)
    } else if r & !0xff == FRAME_NEED && (1..=max_header as i64).contains(&(r & 0xff)) {
        FrameAnswer::NeedHeader((r & 0xff) as usize)
    } else if r & !0x1_ffff == FRAME_LINE && (1..=MAX_LINE).contains(&(r & 0x1_ffff)) {
        FrameAnswer::Line((r & 0x1_ffff) as usize)
    } else {
        FrameAnswer::Invalid
    }
}

/// Answer `kind`.
pub const HALF_REQUEST: u8 = 1;
pub const HALF_RESPONSE: u8 = 2;
/// A message that is part of the next call half of its direction (a Memcached `VALUE` of a
/// reply that ends with `END`): its bytes and syscalls join that half's span.
pub const HALF_PART: u8 = 3;
/// The answer's fixed part; method, resource, status text and attributes follow.
pub const ANSWER_FIXED: usize = 24;
pub const MAX_METHOD: usize = 64;
pub const MAX_RESOURCE: usize = 1024;
pub const MAX_STATUS_TEXT: usize = 64;
pub const MAX_ATTRS: usize = 8;
pub const MAX_ATTR_KEY: usize = 32;
pub const MAX_ATTR_VALUE: usize = 256;
/// Answer `flags`: `status` holds a status.
pub const ANSWER_HAS_STATUS: u8 = 1;
/// Answer `outcome` (enrich: [`OUTCOME_KEEP`] leaves the built-in parser's).
pub const OUTCOME_KEEP: u8 = 255;

/// A call half, or an enrichment, as the guest answered it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    pub kind: u8,
    /// None: [`OUTCOME_KEEP`].
    pub outcome: Option<Outcome>,
    pub status: Option<u32>,
    pub pair_key: u64,
    pub method: String,
    pub resource: String,
    pub status_text: Option<String>,
    pub attrs: Vec<(String, String)>,
}

/// Why an answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("answer shorter than its fields say")]
    Short,
    #[error("answer field over its limit")]
    TooLong,
    #[error("answer kind or outcome out of range")]
    BadValue,
    #[error("attribute key not [a-z0-9_]")]
    BadKey,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes the answer in `b` (the `len` bytes the guest said it wrote, already bounded by the
/// buffer). Layout (docs/plugins.md): kind u8, outcome u8, attribute count u8, flags u8,
/// status u32, pair key u64, method/resource/status-text lengths u16 ×3, reserved u16, then
/// the strings, then per attribute: key length u8, reserved u8, value length u16, key, value.
pub fn answer(b: &[u8]) -> Result<Answer, AnswerError> {
    let fixed = b.get(..ANSWER_FIXED).ok_or(AnswerError::Short)?;
    let u16_at = |i: usize| u16::from_le_bytes([fixed[i], fixed[i + 1]]) as usize;
    let kind = fixed[0];
    if !matches!(kind, 0 | HALF_REQUEST | HALF_RESPONSE | HALF_PART) {
        return Err(AnswerError::BadValue);
    }
    let outcome = match fixed[1] {
        0 => Some(Outcome::Ok),
        1 => Some(Outcome::ClientError),
        2 => Some(Outcome::ServerError),
        3 => Some(Outcome::Unknown),
        OUTCOME_KEEP => None,
        _ => return Err(AnswerError::BadValue),
    };
    let n_attrs = fixed[2] as usize;
    let status = (fixed[3] & ANSWER_HAS_STATUS != 0)
        .then(|| u32::from_le_bytes(fixed[4..8].try_into().expect("4 bytes")));
    let pair_key = u64::from_le_bytes(fixed[8..16].try_into().expect("8 bytes"));
    let (method_len, resource_len, status_len) = (u16_at(16), u16_at(18), u16_at(20));
    if method_len > MAX_METHOD
        || resource_len > MAX_RESOURCE
        || status_len > MAX_STATUS_TEXT
        || n_attrs > MAX_ATTRS
    {
        return Err(AnswerError::TooLong);
    }
    let mut at = ANSWER_FIXED;
    let mut take = |n: usize| -> Result<&[u8], AnswerError> {
        let s = b.get(at..at + n).ok_or(AnswerError::Short)?;
        at += n;
        Ok(s)
    };
    let method = text(take(method_len)?);
    let resource = text(take(resource_len)?);
    let status_text = (status_len > 0)
        .then(|| take(status_len).map(text))
        .transpose()?;
    let mut attrs = Vec::with_capacity(n_attrs);
    for _ in 0..n_attrs {
        let h = take(4)?;
        let (klen, vlen) = (h[0] as usize, u16::from_le_bytes([h[2], h[3]]) as usize);
        if klen == 0 || klen > MAX_ATTR_KEY || vlen > MAX_ATTR_VALUE {
            return Err(AnswerError::TooLong);
        }
        let key = take(klen)?;
        if !key
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
        {
            return Err(AnswerError::BadKey);
        }
        let key = text(key);
        attrs.push((key, text(take(vlen)?)));
    }
    Ok(Answer {
        kind,
        outcome,
        status,
        pair_key,
        method,
        resource,
        status_text,
        attrs,
    })
}

/// The bytes of an answer (the guests' side of [`answer`]): for tests and the docs' examples.
#[cfg(any(test, feature = "test-support"))]
pub fn encode_answer(a: &Answer) -> Vec<u8> {
    let mut b = vec![
        a.kind,
        match a.outcome {
            Some(Outcome::Ok) => 0,
            Some(Outcome::ClientError) => 1,
            Some(Outcome::ServerError) => 2,
            Some(Outcome::Unknown) => 3,
            None => OUTCOME_KEEP,
        },
        a.attrs.len() as u8,
        u8::from(a.status.is_some()),
    ];
    b.extend_from_slice(&a.status.unwrap_or(0).to_le_bytes());
    b.extend_from_slice(&a.pair_key.to_le_bytes());
    let st = a.status_text.as_deref().unwrap_or("");
    for n in [a.method.len(), a.resource.len(), st.len(), 0] {
        b.extend_from_slice(&(n as u16).to_le_bytes());
    }
    b.extend_from_slice(a.method.as_bytes());
    b.extend_from_slice(a.resource.as_bytes());
    b.extend_from_slice(st.as_bytes());
    for (k, v) in &a.attrs {
        b.extend_from_slice(&[k.len() as u8, 0]);
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_answers_decode_by_their_tags() {
        assert_eq!(frame_answer(-1, 24), FrameAnswer::NotAFrame);
        assert_eq!(frame_answer(0, 24), FrameAnswer::Body(0));
        assert_eq!(
            frame_answer(MAX_BODY, 24),
            FrameAnswer::Body(MAX_BODY as u64)
        );
        assert_eq!(frame_answer(FRAME_NEED | 8, 24), FrameAnswer::NeedHeader(8));
        assert_eq!(frame_answer(FRAME_NEED | 25, 24), FrameAnswer::Invalid);
        assert_eq!(frame_answer(FRAME_NEED, 24), FrameAnswer::Invalid);
        assert_eq!(frame_answer(FRAME_LINE | 2048, 24), FrameAnswer::Line(2048));
        assert_eq!(
            frame_answer(FRAME_LINE | 0x2_0000, 24),
            FrameAnswer::Invalid
        );
        assert_eq!(frame_answer(MAX_BODY + 1, 24), FrameAnswer::Invalid);
    }

    #[test]
    fn an_answer_round_trips_and_every_bad_length_is_refused() {
        let a = Answer {
            kind: HALF_RESPONSE,
            outcome: Some(Outcome::ServerError),
            status: Some(42),
            pair_key: 7,
            method: "GET".into(),
            resource: "/orders".into(),
            status_text: Some("E42".into()),
            attrs: vec![("order_id".into(), "1234".into())],
        };
        let b = encode_answer(&a);
        assert_eq!(answer(&b), Ok(a.clone()));
        for cut in 0..b.len() {
            assert!(answer(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut part = b.clone();
        part[0] = HALF_PART;
        assert_eq!(answer(&part).map(|a| a.kind), Ok(HALF_PART));
        let mut bad = b.clone();
        bad[0] = 9;
        assert_eq!(answer(&bad), Err(AnswerError::BadValue));
        let mut bad = b.clone();
        bad[16..18].copy_from_slice(&(MAX_METHOD as u16 + 1).to_le_bytes());
        assert_eq!(answer(&bad), Err(AnswerError::TooLong));
        let mut upper = a;
        upper.attrs[0].0 = "Order".into();
        assert_eq!(answer(&encode_answer(&upper)), Err(AnswerError::BadKey));
    }
}
