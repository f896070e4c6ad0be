//! OP_COMPRESSED bodies inflated only as far as the command's name and collection need: at
//! most `max` bytes out, from the captured compressed bytes (a prefix of the whole), never
//! more work than those bytes and `max` allow.

/// The compressors of OP_COMPRESSED (`compressorId`).
pub fn compressor_name(id: u8) -> Option<&'static str> {
    match id {
        0 => Some("noop"),
        1 => Some("snappy"),
        2 => Some("zlib"),
        3 => Some("zstd"),
        _ => None,
    }
}

/// The first (up to) `max` bytes of `data` decompressed by compressor `id`; what a cut or
/// damaged input still gave (possibly nothing). None for an unknown compressor.
pub fn inflate_prefix(id: u8, data: &[u8], max: usize) -> Option<Vec<u8>> {
    match id {
        0 => Some(data[..data.len().min(max)].to_vec()),
        1 => Some(snappy_prefix(data, max)),
        2 => Some(zlib_prefix(data, max)),
        3 => Some(zstd_prefix(data, max)),
        _ => None,
    }
}

/// Snappy's raw format (what MongoDB sends): a varint of the uncompressed length, then
/// literals and back-references. Decoded by hand so that a prefix of the input gives a prefix
/// of the output, bounded by `max`.
fn snappy_prefix(data: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    // The preamble: the uncompressed length (a varint of up to 5 bytes).
    loop {
        let Some(&b) = data.get(i) else {
            return out;
        };
        i += 1;
        if b & 0x80 == 0 {
            break;
        }
        if i >= 5 {
            return out;
        }
    }
    out.reserve(max.min(data.len().saturating_mul(4)));
    while out.len() < max {
        let Some(&tag) = data.get(i) else {
            break;
        };
        i += 1;
        match tag & 3 {
            0 => {
                // A literal: its length - 1 in the tag's upper bits, or in 1–4 bytes after it.
                let mut len = (tag >> 2) as usize;
                if len >= 60 {
                    let extra = len - 59;
                    let Some(b) = data.get(i..i + extra) else {
                        break;
                    };
                    len = b
                        .iter()
                        .rev()
                        .fold(0usize, |acc, &x| (acc << 8) | x as usize);
                    i += extra;
                }
                let len = len + 1;
                let avail = data.len().saturating_sub(i).min(len);
                let take = avail.min(max - out.len());
                out.extend_from_slice(&data[i..i + take]);
                if avail < len {
                    break;
                }
                i += len;
            }
            kind => {
                let (len, offset) = match kind {
                    1 => {
                        let Some(&b) = data.get(i) else { break };
                        i += 1;
                        (
                            ((tag >> 2) & 7) as usize + 4,
                            ((tag as usize >> 5) << 8) | b as usize,
                        )
                    }
                    2 => {
                        let Some(b) = data.get(i..i + 2) else { break };
                        i += 2;
                        (
                            (tag >> 2) as usize + 1,
                            u16::from_le_bytes([b[0], b[1]]) as usize,
                        )
                    }
                    _ => {
                        let Some(b) = data.get(i..i + 4) else { break };
                        i += 4;
                        (
                            (tag >> 2) as usize + 1,
                            u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
                        )
                    }
                };
                if offset == 0 || offset > out.len() {
                    break; // damaged
                }
                let take = len.min(max - out.len());
                let start = out.len() - offset;
                // Byte by byte: a copy may overlap what it writes (a run).
                for k in 0..take {
                    let b = out[start + k];
                    out.push(b);
                }
            }
        }
    }
    out
}

fn zlib_prefix(data: &[u8], max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(max);
    let mut z = flate2::Decompress::new(true);
    // One call: output is bounded by the vector's capacity; a cut input stops where it ends.
    let _ = z.decompress_vec(data, &mut out, flate2::FlushDecompress::Sync);
    out.truncate(max);
    out
}

fn zstd_prefix(data: &[u8], max: usize) -> Vec<u8> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    let mut out = vec![0u8; max];
    let Ok(mut d) = Decoder::new() else {
        return Vec::new();
    };
    let mut input = InBuffer::around(data);
    let mut written = 0;
    // Each round either consumes input or fills output; both are bounded.
    for _ in 0..64 {
        let mut o = OutBuffer::around(&mut out[written..]);
        let before = input.pos();
        match d.run(&mut input, &mut o) {
            Ok(_) => {}
            Err(_) => break,
        }
        let n = o.pos();
        written += n;
        if written >= max || (n == 0 && input.pos() == before) {
            break;
        }
    }
    out.truncate(written);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut v = b"hello hello hello world, ".repeat(50);
        v.extend((0..2000u32).map(|i| (i * 7 % 251) as u8));
        v
    }

    #[test]
    fn each_compressor_gives_the_prefix_bounded_whole_or_cut() {
        let plain = sample();
        let snappy = snap::raw::Encoder::new().compress_vec(&plain).unwrap();
        let zlib = {
            use std::io::Write;
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(&plain).unwrap();
            e.finish().unwrap()
        };
        let zstd = zstd::bulk::compress(&plain, 3).unwrap();
        for (id, c) in [(1u8, &snappy), (2, &zlib), (3, &zstd)] {
            assert_eq!(inflate_prefix(id, c, 1 << 20).unwrap(), plain, "{id}");
            assert_eq!(inflate_prefix(id, c, 100).unwrap(), &plain[..100], "{id}");
            // A cut input gives a (possibly empty) prefix, never more than there is.
            for cut in [0, 1, 5, c.len() / 2, c.len() - 1] {
                let got = inflate_prefix(id, &c[..cut], 4096).unwrap();
                assert!(plain.starts_with(&got), "{id} cut {cut}");
            }
            // Garbage: no panic.
            let mut bad = c.clone();
            for b in bad.iter_mut().step_by(3) {
                *b ^= 0x5a;
            }
            assert!(inflate_prefix(id, &bad, 4096).unwrap().len() <= 4096);
        }
        assert_eq!(inflate_prefix(9, &zlib, 10), None);
    }
}
