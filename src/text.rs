//! Small string helpers shared by modules that bound what they keep.

/// `s` cut to at most `max` bytes, at a character boundary (never inside a UTF-8 sequence).
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The first `max` bytes of `b` as text, invalid UTF-8 replaced by U+FFFD (a cut inside a
/// multi-byte character leaves one at the end). Protocol text is nearly always ASCII, checked
/// in one pass: on the short keys and names parsers keep that costs fewer instructions than
/// `from_utf8` or the lossy walk (callgrind, docs/performance.md); anything else takes the
/// lossy walk.
pub fn lossy_prefix(b: &[u8], max: usize) -> String {
    let b = &b[..b.len().min(max)];
    if b.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        return unsafe { String::from_utf8_unchecked(b.to_vec()) };
    }
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cuts_at_a_character_boundary() {
        assert_eq!(super::cut("abc", 5), "abc");
        assert_eq!(super::cut("abc", 2), "ab");
        // "é" is two bytes: a cut inside it keeps the character out.
        assert_eq!(super::cut("aé", 2), "a");
        assert_eq!(super::cut("aé", 3), "aé");
        assert_eq!(super::cut("é", 0), "");
    }

    #[test]
    fn a_lossy_prefix_is_the_lossy_conversion_of_the_cut_bytes() {
        for (b, max) in [
            (&b"GET /x"[..], 3),
            ("aé".as_bytes(), 2),
            ("aé".as_bytes(), 9),
            (&[0x61, 0xff, 0x62][..], 3),
            (&b""[..], 0),
        ] {
            let cut = &b[..b.len().min(max)];
            assert_eq!(super::lossy_prefix(b, max), String::from_utf8_lossy(cut));
        }
    }
}
