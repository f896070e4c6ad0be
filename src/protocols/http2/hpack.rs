//! HPACK (RFC 7541) decoding that tolerates a table it does not fully know.
//!
//! One [`Decoder`] per direction, fed header blocks in capture order. The dynamic table is kept
//! as a list of the entries inserted since ebtop started watching, newest first: the encoder's
//! table is always a newest-first prefix of everything it inserted, so position `i` of the
//! encoder's dynamic table is position `i` of this list whatever sizes the encoder evicted by.
//! Eviction by size therefore only bounds memory here ([`MAX_TABLE`]); keeping an entry the
//! encoder already dropped is harmless (the encoder never refers to it).
//!
//! A connection picked up mid-way had entries before ours, of unknown number: an index past
//! the known entries then names an unknown field, reported as [`Field::Unknown`], never
//! guessed. The table becomes fully known again when the unknown tail must have been evicted:
//! after a size update to N once the known entries leave no room for another entry (an entry
//! takes at least 32 bytes), e.g. a size update to 0.
//!
//! Huffman-coded strings are decoded by `httlib_huffman` (a flattened table read 5 bits at a
//! time; `loona_hpack`'s decoder walked a hash map per bit and was a third of an HTTP/2 parse).
//! `loona_hpack`'s whole-block decoder is the reference the tests compare this one with on
//! fully known connections.

use std::collections::VecDeque;

/// Bytes of dynamic-table entries (RFC sizes) kept per direction; older ones are dropped.
pub const MAX_TABLE: usize = 64 * 1024;
/// A table size a peer may announce that we still track exactly (larger ones are capped).
const DEFAULT_TABLE: usize = 4096;
/// The RFC's per-entry overhead.
const ENTRY_OVERHEAD: usize = 32;

/// RFC 7541 Appendix A.
static STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// A decoded header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Known {
        name: Vec<u8>,
        value: Vec<u8>,
    },
    /// The value is known, the name referred to an entry from before ebtop started.
    UnknownName {
        value: Vec<u8>,
    },
    /// Referred to an entry from before ebtop started.
    Unknown,
}

/// Why a block could not be decoded; the table is unknown from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    Truncated,
    BadInteger,
    BadIndex,
    BadHuffman,
    /// A size update after a field.
    BadSizeUpdate,
}

#[derive(Debug)]
struct Entry {
    name: Option<Vec<u8>>,
    value: Vec<u8>,
    /// RFC size, a lower bound when the name is unknown.
    size: usize,
}

#[derive(Debug)]
pub struct Decoder {
    /// Entries inserted while watched, newest first.
    table: VecDeque<Entry>,
    /// Sum of `table`'s sizes.
    known_size: usize,
    /// Entries from before the known ones may still be in the encoder's table.
    tail_unknown: bool,
    /// An upper bound of the encoder's table size, when one is known (a size update seen, or
    /// the connection seen from its start).
    max_size: Option<usize>,
}

impl Decoder {
    /// `from_start`: the connection was seen from its first byte (the table starts empty).
    pub fn new(from_start: bool) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            known_size: 0,
            tail_unknown: !from_start,
            max_size: from_start.then_some(DEFAULT_TABLE),
        }
    }

    /// Whether every entry the encoder may refer to is known.
    pub fn is_exact(&self) -> bool {
        !self.tail_unknown
    }

    /// The decoding peer announced SETTINGS_HEADER_TABLE_SIZE: the encoder may grow its
    /// table to it without telling.
    pub fn allow(&mut self, size: u32) {
        if let Some(m) = self.max_size.as_mut() {
            *m = (*m).max(size as usize);
        }
    }

    /// Forgets everything: bytes of a block were lost, so insertions may have been missed.
    pub fn lose(&mut self) {
        self.table.clear();
        self.known_size = 0;
        self.tail_unknown = true;
        self.max_size = None;
    }

    /// Bytes held (for memory bounds in tests).
    #[cfg(test)]
    pub fn held_bytes(&self) -> usize {
        self.table
            .iter()
            .map(|e| e.name.as_ref().map_or(0, Vec::len) + e.value.len())
            .sum()
    }

    fn check_tail(&mut self) {
        if let Some(max) = self.max_size {
            if self.known_size + ENTRY_OVERHEAD > max {
                self.tail_unknown = false;
            }
        }
    }

    fn insert(&mut self, name: Option<Vec<u8>>, value: Vec<u8>) {
        let size = name.as_ref().map_or(0, Vec::len) + value.len() + ENTRY_OVERHEAD;
        self.table.push_front(Entry { name, value, size });
        self.known_size += size;
        let limit = self.max_size.unwrap_or(MAX_TABLE).min(MAX_TABLE);
        while self.known_size > limit {
            let Some(old) = self.table.pop_back() else {
                break;
            };
            self.known_size -= old.size;
            // Dropped for memory while the encoder may still hold it.
            if self.max_size.is_none_or(|m| m > MAX_TABLE) {
                self.tail_unknown = true;
            }
        }
        self.check_tail();
    }

    /// The field at `index` (1-based over the static then dynamic table).
    fn lookup(&self, index: usize) -> Result<Field, Error> {
        match index {
            0 => Err(Error::BadIndex),
            1..=61 => {
                let (n, v) = STATIC_TABLE[index - 1];
                Ok(Field::Known {
                    name: n.as_bytes().to_vec(),
                    value: v.as_bytes().to_vec(),
                })
            }
            _ => match self.table.get(index - 62) {
                Some(Entry {
                    name: Some(n),
                    value,
                    ..
                }) => Ok(Field::Known {
                    name: n.clone(),
                    value: value.clone(),
                }),
                Some(Entry { name: None, .. }) => Ok(Field::Unknown),
                None if self.tail_unknown => Ok(Field::Unknown),
                None => Err(Error::BadIndex),
            },
        }
    }

    /// The name at `index`, None when unknown.
    fn lookup_name(&self, index: usize) -> Result<Option<Vec<u8>>, Error> {
        match self.lookup(index)? {
            Field::Known { name, .. } => Ok(Some(name)),
            _ => Ok(None),
        }
    }

    /// Decodes one whole header block, updating the table; on an error the table is lost
    /// (call [`Decoder::lose`] happens here) and the fields decoded so far are returned too.
    pub fn decode(&mut self, mut b: &[u8], out: &mut Vec<Field>) -> Result<(), Error> {
        let r = self.decode_inner(&mut b, out);
        if r.is_err() {
            self.lose();
        }
        r
    }

    fn decode_inner(&mut self, b: &mut &[u8], out: &mut Vec<Field>) -> Result<(), Error> {
        let mut fields_seen = false;
        while let Some(&first) = b.first() {
            if first & 0x80 != 0 {
                let index = integer(b, 7)?;
                out.push(self.lookup(index)?);
                fields_seen = true;
            } else if first & 0xc0 == 0x40 {
                let index = integer(b, 6)?;
                let name = if index == 0 {
                    Some(string(b)?)
                } else {
                    self.lookup_name(index)?
                };
                let value = string(b)?;
                out.push(match &name {
                    Some(n) => Field::Known {
                        name: n.clone(),
                        value: value.clone(),
                    },
                    None => Field::UnknownName {
                        value: value.clone(),
                    },
                });
                self.insert(name, value);
                fields_seen = true;
            } else if first & 0xe0 == 0x20 {
                let size = integer(b, 5)?;
                // Allowed only before the block's first field (RFC 7541 4.2). Its bound (the
                // peer's SETTINGS) is not checked: capture order across directions may differ.
                if fields_seen {
                    return Err(Error::BadSizeUpdate);
                }
                self.max_size = Some(size);
                while self.known_size > size {
                    let Some(old) = self.table.pop_back() else {
                        break;
                    };
                    self.known_size -= old.size;
                }
                self.check_tail();
            } else {
                // Literal without indexing (0000) or never indexed (0001): 4-bit name index.
                let index = integer(b, 4)?;
                let name = if index == 0 {
                    Some(string(b)?)
                } else {
                    self.lookup_name(index)?
                };
                let value = string(b)?;
                out.push(match name {
                    Some(name) => Field::Known { name, value },
                    None => Field::UnknownName { value },
                });
                fields_seen = true;
            }
        }
        Ok(())
    }
}

/// An HPACK integer with an `n`-bit prefix, advancing `b` past it.
fn integer(b: &mut &[u8], n: u32) -> Result<usize, Error> {
    let mask = (1u32 << n) - 1;
    let first = *b.first().ok_or(Error::Truncated)?;
    *b = &b[1..];
    let mut v = u32::from(first) & mask;
    if v < mask {
        return Ok(v as usize);
    }
    // At most 4 continuation bytes: values up to 2^28 and more than any sane length or index.
    for shift in (0..28).step_by(7) {
        let c = *b.first().ok_or(Error::Truncated)?;
        *b = &b[1..];
        v += u32::from(c & 0x7f) << shift;
        if c & 0x80 == 0 {
            return Ok(v as usize);
        }
    }
    Err(Error::BadInteger)
}

/// A Huffman-coded string (RFC 7541 5.2, Appendix B).
fn huffman_decode(raw: &[u8]) -> Result<Vec<u8>, Error> {
    use httlib_huffman::encoder::table::ENCODE_TABLE;
    // Codes are at least 5 bits: the text is at most 8/5 of the code's length.
    let mut text = Vec::with_capacity(raw.len() * 8 / 5 + 1);
    httlib_huffman::decode(raw, &mut text, httlib_huffman::DecoderSpeed::FiveBits)
        .map_err(|_| Error::BadHuffman)?;
    // The crate checks the padding's value, not its length ("00" passes): the bits after the
    // last code must be fewer than 8 and all ones (the EOS code's first bits).
    let coded: usize = text
        .iter()
        .map(|&c| usize::from(ENCODE_TABLE[usize::from(c)].0))
        .sum();
    let pad = (raw.len() * 8)
        .checked_sub(coded)
        .ok_or(Error::BadHuffman)?;
    if pad > 7 {
        return Err(Error::BadHuffman);
    }
    let ones = (1u8 << pad).wrapping_sub(1);
    match raw.last() {
        Some(&last) if last & ones != ones => Err(Error::BadHuffman),
        _ => Ok(text),
    }
}

/// A string literal (raw or Huffman-coded), advancing `b` past it.
fn string(b: &mut &[u8]) -> Result<Vec<u8>, Error> {
    let huffman = b.first().ok_or(Error::Truncated)? & 0x80 != 0;
    let len = integer(b, 7)?;
    if len > b.len() {
        return Err(Error::Truncated);
    }
    let (raw, rest) = b.split_at(len);
    *b = rest;
    if huffman {
        huffman_decode(raw)
    } else {
        Ok(raw.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(n: &str, v: &str) -> Field {
        Field::Known {
            name: n.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
        }
    }

    fn encode(enc: &mut loona_hpack::Encoder, headers: &[(&str, &str)]) -> Vec<u8> {
        enc.encode(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The Huffman decoder agrees with `loona_hpack`'s (the reference) on valid and invalid
    /// codes alike: random byte strings (most are invalid: bad padding, EOS) and the codes of
    /// random texts.
    #[test]
    fn huffman_strings_decode_as_the_reference_decodes_them() {
        let mut reference = loona_hpack::huffman::HuffmanDecoder::new();
        let mut enc = loona_hpack::Encoder::new();
        let mut next = crate::xorshift::sequence(0x9e37_79b9_7f4a_7c15);
        let (mut valid, mut invalid) = (0, 0);
        for i in 0..40_000 {
            let len = (next() % 12) as usize;
            let raw: Vec<u8> = if i % 2 == 0 {
                (0..len).map(|_| next() as u8).collect()
            } else {
                // A real code: a header block's value, Huffman-coded by the reference encoder.
                let text: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let block = enc.encode([(&b"x-k"[..], &text[..])]);
                let mut b = &block[..];
                let before = b.len();
                let _ = integer(&mut b, 6); // the literal's representation and index
                let _ = string(&mut b); // its name
                let used = before - b.len();
                let mut v = &block[used..];
                if v.first().is_none_or(|f| f & 0x80 == 0) {
                    continue; // sent raw: no Huffman code to compare
                }
                let n = integer(&mut v, 7).unwrap();
                v[..n].to_vec()
            };
            let mut input = vec![0x80 | raw.len() as u8];
            input.extend_from_slice(&raw);
            let mine = string(&mut &input[..]).ok();
            let theirs = reference.decode(&raw).ok();
            assert_eq!(mine, theirs, "{raw:02x?}");
            if mine.is_some() {
                valid += 1;
            } else {
                invalid += 1;
            }
        }
        assert!(
            valid > 5_000 && invalid > 5_000,
            "{valid} valid, {invalid} invalid"
        );
    }

    /// RFC 7541 C.4: three requests with Huffman coding and a dynamic table.
    #[test]
    fn rfc_c4_requests_with_huffman() {
        let mut d = Decoder::new(true);
        let blocks = [
            "828684418cf1e3c2e5f23a6ba0ab90f4ff",
            "828684be5886a8eb10649cbf",
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        ];
        let mut all = Vec::new();
        for block in blocks {
            let mut out = Vec::new();
            d.decode(&hex(block), &mut out).unwrap();
            all.push(out);
        }
        assert_eq!(
            all[2],
            vec![
                known(":method", "GET"),
                known(":scheme", "https"),
                known(":path", "/index.html"),
                known(":authority", "www.example.com"),
                known("custom-key", "custom-value"),
            ]
        );
        assert_eq!(all[1][4], known("cache-control", "no-cache"));
        assert!(d.is_exact());
    }

    /// Blocks from the crate's encoder decode as the crate's decoder decodes them.
    #[test]
    fn agrees_with_the_reference_decoder() {
        let mut enc = loona_hpack::Encoder::new();
        let mut reference = loona_hpack::Decoder::new();
        let mut d = Decoder::new(true);
        for i in 0..200 {
            let path = format!("/items/{}", i % 17);
            let n = i.to_string();
            let headers = [
                (":method", if i % 3 == 0 { "POST" } else { "GET" }),
                (":path", path.as_str()),
                (":authority", "example.test"),
                ("x-request-id", n.as_str()),
                ("content-type", "application/grpc"),
            ];
            let block = encode(&mut enc, &headers);
            let want = reference.decode(&block).unwrap();
            let mut got = Vec::new();
            d.decode(&block, &mut got).unwrap();
            let got: Vec<(Vec<u8>, Vec<u8>)> = got
                .into_iter()
                .map(|f| match f {
                    Field::Known { name, value } => (name, value),
                    other => panic!("unknown field {other:?}"),
                })
                .collect();
            assert_eq!(got, want, "block {i}");
        }
    }

    /// Picked up mid-way: entries from before are unknown, literals and the static table
    /// decode; a size update to 0 makes the table exact again.
    #[test]
    fn pickup_mid_way_then_recovery() {
        // Before ebtop: `:path /before` inserted (literal with indexing, name 4). Then a block
        // `:method GET` (static 2), the entry (dynamic 62), and a new literal `x-b: 2`.
        let mut full = Decoder::new(true);
        let mut out = Vec::new();
        full.decode(b"\x44\x07/before", &mut out).unwrap();
        let block = b"\x82\xbe\x40\x03x-b\x012\xbe";
        let mut out = Vec::new();
        full.decode(block, &mut out).unwrap();
        assert_eq!(out[1], known(":path", "/before"));
        let mut d = Decoder::new(false);
        let mut out = Vec::new();
        d.decode(block, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                known(":method", "GET"),
                Field::Unknown,
                known("x-b", "2"),
                known("x-b", "2")
            ]
        );
        assert!(!d.is_exact());
        // A size update to 0 then back: everything from before is gone.
        let mut block = vec![0x20, 0x3f, 0xe1, 0x1f];
        block.extend_from_slice(&[0x82, 0x40, 1, b'a', 1, b'b', 0xbe]);
        let mut out = Vec::new();
        d.decode(&block, &mut out).unwrap();
        assert!(d.is_exact());
        assert_eq!(
            out,
            vec![known(":method", "GET"), known("a", "b"), known("a", "b")]
        );
        // An index past the known entries is now an error, not an unknown field.
        let mut out = Vec::new();
        assert_eq!(d.decode(&[0xc0], &mut out), Err(Error::BadIndex));
        assert!(!d.is_exact());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut d = Decoder::new(true);
        for bad in [
            &[0x80][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            &[0x40, 0x85, 0xff],
            &[0x00, 0x81, 0xff, 0x00],
            &[0x82, 0x20],
        ] {
            let mut out = Vec::new();
            assert!(d.decode(bad, &mut out).is_err(), "{bad:?}");
            d = Decoder::new(true);
        }
    }

    #[test]
    fn memory_is_bounded() {
        let mut d = Decoder::new(true);
        d.allow(u32::MAX);
        let value = vec![b'v'; 1000];
        let mut block = vec![0x40, 1, b'n', 0x7f];
        let mut len = Vec::new();
        let mut rest = value.len() - 127;
        while rest >= 128 {
            len.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        len.push(rest as u8);
        block.extend_from_slice(&len);
        block.extend_from_slice(&value);
        for _ in 0..1000 {
            let mut out = Vec::new();
            d.decode(&block, &mut out).unwrap();
        }
        assert!(d.held_bytes() <= MAX_TABLE);
    }
}
