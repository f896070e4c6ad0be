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
}
