//! W3C Trace Context (`traceparent`, https://www.w3.org/TR/trace-context/): the header an
//! instrumented application sends with each request, so that the spans ebtop exports
//! (`--otlp`) join the application's own trace. Pure and bounded: 55 bytes read at most.

/// A parsed `traceparent`: version 00's fields (a later version's first four, as the
/// specification asks a version-00 reader to take them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    /// The span of the sender that the request belongs to: the parent of the span ebtop makes.
    pub parent_id: [u8; 8],
    pub flags: u8,
}

/// Length of a version-00 value: `00-<32 hex>-<16 hex>-<2 hex>`.
pub const TRACEPARENT_LEN: usize = 55;

impl TraceParent {
    /// The header's value, surrounding blanks allowed; None unless it is a valid
    /// `traceparent` (lowercase hex, ids not all zero, version not `ff`; a later version may
    /// carry more after a `-`).
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let v = value.trim_ascii();
        if v.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&v[0..2])?;
        if version == 0xff || (version == 0 && v.len() != TRACEPARENT_LEN) {
            return None;
        }
        if v.len() > TRACEPARENT_LEN && v[TRACEPARENT_LEN] != b'-' {
            return None;
        }
        if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, b) in parent_id.iter_mut().enumerate() {
            *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&v[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The version-00 form (what the `traceparent` call detail shows).
    pub fn to_header(&self) -> String {
        let mut s = String::with_capacity(TRACEPARENT_LEN);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.parent_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        s
    }
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
}

/// Two lowercase hex digits (the specification allows no uppercase).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_example_parses_and_prints_back() {
        let tp = TraceParent::parse(EXAMPLE.as_bytes()).unwrap();
        assert_eq!(tp.trace_id[0], 0x4b);
        assert_eq!(tp.trace_id[15], 0x36);
        assert_eq!(
            tp.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(tp.flags, 1);
        assert_eq!(tp.to_header(), EXAMPLE);
        assert_eq!(
            TraceParent::parse(format!("  {EXAMPLE} ").as_bytes()),
            Some(tp)
        );
    }

    #[test]
    fn invalid_values_are_refused() {
        let bad = [
            "",
            "00",
            // Uppercase hex, zero ids, version ff, wrong separators, version 00 too long.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ];
        for b in bad {
            assert_eq!(TraceParent::parse(b.as_bytes()), None, "{b}");
        }
        // A later version with more fields: its first four are read.
        assert!(TraceParent::parse(
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-follows"
        )
        .is_some());
    }
}
