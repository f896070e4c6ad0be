//! A zero-copy walk over BSON documents that may be only partly captured: the bytes are a
//! message body's captured head and, apart from it, its last bytes (a kernel tail), each at its
//! offset in the body ([`Sparse`]). Every length is checked against the document's and the
//! captured bytes' bounds before it is used; a walk only moves forward (each element at least 2
//! bytes), so it is linear in the document's length, and it never descends on its own (the
//! caller walks a nested document explicitly, a fixed few levels deep).

/// A message body's bytes as captured: `head` from offset 0, `tail` from `tail_start`.
#[derive(Debug, Clone, Copy)]
pub struct Sparse<'a> {
    pub head: &'a [u8],
    pub tail: &'a [u8],
    pub tail_start: usize,
}

impl<'a> Sparse<'a> {
    pub fn whole(b: &'a [u8]) -> Sparse<'a> {
        Sparse {
            head: b,
            tail: &[],
            tail_start: usize::MAX,
        }
    }

    /// Bytes `off..off+len`, when captured in one piece.
    pub fn get(&self, off: usize, len: usize) -> Option<&'a [u8]> {
        let end = off.checked_add(len)?;
        if end <= self.head.len() {
            return Some(&self.head[off..end]);
        }
        let rel = off.checked_sub(self.tail_start)?;
        self.tail.get(rel..rel.checked_add(len)?)
    }

    pub fn u8(&self, off: usize) -> Option<u8> {
        self.get(off, 1).map(|b| b[0])
    }

    pub fn i32(&self, off: usize) -> Option<i32> {
        self.get(off, 4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The bytes captured from `off` on in the same piece (for a C string's search).
    fn rest(&self, off: usize) -> &'a [u8] {
        if off < self.head.len() {
            &self.head[off..]
        } else if let Some(rel) = off.checked_sub(self.tail_start) {
            self.tail.get(rel..).unwrap_or(&[])
        } else {
            &[]
        }
    }

    /// A NUL-terminated string at `off` (at most `max` bytes before the NUL) and the offset
    /// after its NUL.
    pub fn cstr(&self, off: usize, max: usize) -> Option<(&'a [u8], usize)> {
        let rest = self.rest(off);
        let rest = &rest[..rest.len().min(max + 1)];
        let n = memchr::memchr(0, rest)?;
        Some((&rest[..n], off + n + 1))
    }
}

/// Element types whose values ebtop reads.
pub const DOUBLE: u8 = 0x01;
pub const STRING: u8 = 0x02;
pub const DOCUMENT: u8 = 0x03;
pub const ARRAY: u8 = 0x04;
pub const BOOL: u8 = 0x08;
pub const INT32: u8 = 0x10;
pub const INT64: u8 = 0x12;

/// Longest element name walked (MongoDB's field names are far shorter in practice).
const MAX_NAME: usize = 1024;

/// One element of a document: its type, name and where its value lies in the body.
#[derive(Debug, Clone, Copy)]
pub struct Element<'a> {
    pub ty: u8,
    pub name: &'a [u8],
    pub value: usize,
    pub value_len: usize,
}

/// Why a walk stopped before the document's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The bytes it needed were not captured.
    Cut,
    /// The bytes are no BSON (a length out of bounds, an unknown type).
    Bad,
}

/// The length of a value of type `ty` at `off` (`limit`: the containing document's end).
fn value_len(s: &Sparse, ty: u8, off: usize, limit: usize) -> Result<usize, Stop> {
    let fixed = match ty {
        0x06 | 0x0a | 0xff | 0x7f => Some(0),
        0x08 => Some(1),
        0x10 => Some(4),
        0x01 | 0x09 | 0x11 | 0x12 => Some(8),
        0x07 => Some(12),
        0x13 => Some(16),
        _ => None,
    };
    if let Some(n) = fixed {
        return Ok(n);
    }
    let len_at = |o: usize| -> Result<usize, Stop> {
        let n = s.i32(o).ok_or(Stop::Cut)?;
        usize::try_from(n).map_err(|_| Stop::Bad)
    };
    let n = match ty {
        // String, JavaScript, symbol: int32 length (with the NUL), bytes.
        0x02 | 0x0d | 0x0e => len_at(off)?.checked_add(4).ok_or(Stop::Bad)?,
        // Document, array, code with scope: int32 total length.
        0x03 | 0x04 | 0x0f => len_at(off)?,
        // Binary: int32 length, subtype, bytes.
        0x05 => len_at(off)?.checked_add(5).ok_or(Stop::Bad)?,
        // DBPointer: string, 12-byte id.
        0x0c => len_at(off)?.checked_add(16).ok_or(Stop::Bad)?,
        // Regex: two C strings.
        0x0b => {
            let (_, after) = s.cstr(off, limit.saturating_sub(off)).ok_or(Stop::Cut)?;
            let (_, end) = s
                .cstr(after, limit.saturating_sub(after))
                .ok_or(Stop::Cut)?;
            end - off
        }
        _ => return Err(Stop::Bad),
    };
    if matches!(ty, 0x03 | 0x04 | 0x0f) && n < 5 {
        return Err(Stop::Bad);
    }
    if off.checked_add(n).is_none_or(|e| e > limit) {
        return Err(Stop::Bad);
    }
    Ok(n)
}

/// The document at `off`, within `limit` (the end of what contains it): its end offset.
pub fn doc_end(s: &Sparse, off: usize, limit: usize) -> Result<usize, Stop> {
    let n = s.i32(off).ok_or(Stop::Cut)?;
    let n = usize::try_from(n).map_err(|_| Stop::Bad)?;
    let end = off.checked_add(n).ok_or(Stop::Bad)?;
    if n < 5 || end > limit {
        return Err(Stop::Bad);
    }
    Ok(end)
}

/// Walks the elements of the document at `off` (within `limit`), handing each to `f` until it
/// returns false. Ok when the walk reached the document's end or `f` stopped it.
pub fn walk<'a>(
    s: &Sparse<'a>,
    off: usize,
    limit: usize,
    mut f: impl FnMut(&Element<'a>) -> bool,
) -> Result<(), Stop> {
    let end = doc_end(s, off, limit)?;
    let mut at = off + 4;
    // The last byte is the document's NUL.
    while at < end - 1 {
        let ty = s.u8(at).ok_or(Stop::Cut)?;
        let (name, value) = s
            .cstr(at + 1, MAX_NAME.min(end - 1 - (at + 1)))
            .ok_or(Stop::Cut)?;
        if value >= end {
            return Err(Stop::Bad);
        }
        let n = value_len(s, ty, value, end - 1)?;
        let e = Element {
            ty,
            name,
            value,
            value_len: n,
        };
        if !f(&e) {
            return Ok(());
        }
        at = value + n;
    }
    if at != end - 1 {
        return Err(Stop::Bad);
    }
    Ok(())
}

/// A string value's bytes (without the NUL), when captured.
pub fn string<'a>(s: &Sparse<'a>, e: &Element) -> Option<&'a [u8]> {
    if e.ty != STRING || e.value_len < 5 {
        return None;
    }
    s.get(e.value + 4, e.value_len - 5)
}

/// A numeric value (double, int32, int64, bool) as an i64, when captured.
pub fn number(s: &Sparse, e: &Element) -> Option<f64> {
    let b = s.get(e.value, e.value_len)?;
    match e.ty {
        DOUBLE => Some(f64::from_le_bytes(b.try_into().ok()?)),
        INT32 => Some(i32::from_le_bytes(b.try_into().ok()?) as f64),
        INT64 => Some(i64::from_le_bytes(b.try_into().ok()?) as f64),
        BOOL => Some(f64::from(b[0] != 0)),
        _ => None,
    }
}

/// How many elements the document or array at `off` holds (within `limit`), when all of it
/// was captured.
pub fn count(s: &Sparse, off: usize, limit: usize) -> Option<u64> {
    let mut n = 0u64;
    walk(s, off, limit, |_| {
        n += 1;
        true
    })
    .ok()?;
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(elems: &[u8]) -> Vec<u8> {
        let mut d = ((elems.len() + 5) as i32).to_le_bytes().to_vec();
        d.extend_from_slice(elems);
        d.push(0);
        d
    }

    #[test]
    fn walks_elements_and_reads_strings_and_numbers() {
        let mut e = vec![STRING];
        e.extend_from_slice(b"find\0");
        e.extend_from_slice(&7i32.to_le_bytes());
        e.extend_from_slice(b"orders\0");
        e.push(DOUBLE);
        e.extend_from_slice(b"ok\0");
        e.extend_from_slice(&1.0f64.to_le_bytes());
        let d = doc(&e);
        let s = Sparse::whole(&d);
        let mut seen = Vec::new();
        walk(&s, 0, d.len(), |el| {
            seen.push((el.name.to_vec(), string(&s, el), number(&s, el)));
            true
        })
        .unwrap();
        assert_eq!(seen[0].0, b"find");
        assert_eq!(seen[0].1, Some(&b"orders"[..]));
        assert_eq!(seen[1].2, Some(1.0));
        assert_eq!(count(&s, 0, d.len()), Some(2));
    }

    #[test]
    fn lengths_out_of_bounds_stop_the_walk() {
        let mut e = vec![STRING];
        e.extend_from_slice(b"a\0");
        e.extend_from_slice(&i32::MAX.to_le_bytes());
        let d = doc(&e);
        assert_eq!(
            walk(&Sparse::whole(&d), 0, d.len(), |_| true),
            Err(Stop::Bad)
        );
        let mut e = vec![DOCUMENT];
        e.extend_from_slice(b"a\0");
        e.extend_from_slice(&(-7i32).to_le_bytes());
        let d = doc(&e);
        assert_eq!(
            walk(&Sparse::whole(&d), 0, d.len(), |_| true),
            Err(Stop::Bad)
        );
        // Cut: the bytes end inside the document.
        let mut e = vec![INT32];
        e.extend_from_slice(b"n\0");
        e.extend_from_slice(&5i32.to_le_bytes());
        let d = doc(&e);
        assert_eq!(
            walk(&Sparse::whole(&d[..6]), 0, d.len(), |_| true),
            Err(Stop::Cut)
        );
        // Every prefix and every byte flipped: no panic.
        for i in 0..d.len() {
            let _ = walk(&Sparse::whole(&d[..i]), 0, d.len(), |_| true);
            let mut x = d.clone();
            x[i] ^= 0xff;
            let _ = walk(&Sparse::whole(&x), 0, x.len(), |_| true);
        }
    }

    #[test]
    fn a_walk_goes_on_in_the_tail() {
        // {a: "xxxx…" (100 bytes), ok: 1.0}: the head holds the start, the tail the end.
        let mut e = vec![STRING];
        e.extend_from_slice(b"a\0");
        e.extend_from_slice(&101i32.to_le_bytes());
        e.extend_from_slice(&[b'x'; 100]);
        e.push(0);
        e.push(DOUBLE);
        e.extend_from_slice(b"ok\0");
        e.extend_from_slice(&1.0f64.to_le_bytes());
        let d = doc(&e);
        let tail_start = d.len() - 20;
        let s = Sparse {
            head: &d[..12],
            tail: &d[tail_start..],
            tail_start,
        };
        let mut ok = None;
        walk(&s, 0, d.len(), |el| {
            if el.name == b"ok" {
                ok = number(&s, el);
            }
            true
        })
        .unwrap();
        assert_eq!(ok, Some(1.0));
    }
}
