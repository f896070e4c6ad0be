//! The read budget of a recording (docs/security.md, "Recordings"): a recording is a file
//! anyone may hand to `ebtop -r`, so what it declares (lengths, counts) never decides what
//! ebtop allocates. Every cap here is checked before or while the bytes are turned into
//! values; what lies beyond a cap is skipped (and counted where the reader can say what it
//! was), never allocated.
//!
//! With these, a replay's reader holds at most about three frames of file bytes, one
//! decompressed frame and the header: ≈ 5 × [`MAX_FRAME`] + [`MAX_HEADER`], whatever the file.

use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// Largest frame (compressed or decompressed) a reader accepts. The writer cuts a frame at
/// 1 MiB of records (plus the record that crossed it: ≤ 16 KiB for an event, 256 KiB for one
/// copied whole, ~1 MiB for a flow part), so a real frame stays far below; a larger one is
/// counted corrupt.
pub const MAX_FRAME: usize = 16 << 20;
/// Largest header JSON a reader accepts: the process table at start (≤ [`MAX_PROCESSES`]
/// entries of a few KiB), the open sockets and the session's meta.
pub const MAX_HEADER: usize = 16 << 20;
/// A frame may expand to at most this many times its compressed size (and to at least
/// [`MIN_EXPANSION_ALLOWED`] bytes): recorded kernel records compress 5–50 fold, a
/// decompression bomb a million fold. Bounds the work a replay does per byte of file.
pub const MAX_EXPANSION: usize = 512;
/// A frame of any size may expand to this many bytes (small frames compress least well).
pub const MIN_EXPANSION_ALLOWED: usize = 16 << 10;
/// Processes the header's process table may hold: the process table's own size
/// ([`crate::procinfo::ProcessTable`]); more are skipped and counted.
pub const MAX_PROCESSES: usize = 16_384;
/// Open sockets the header may list; more are skipped and counted.
pub const MAX_SOCKETS: usize = 1 << 20;
/// Flows of one interval's report gathered from its recorded parts (kind 5 `more`).
pub const MAX_REPORT_FLOWS: usize = 1 << 18;
/// Longest `comm` kept (the kernel's is 16 bytes).
pub const MAX_COMM: usize = 64;
/// Longest path kept (a program's `exe`, a cgroup path).
pub const MAX_PATH: usize = 1024;
/// Arguments of a command line kept, the longest kept argument, and the bytes of all of
/// them: the same for a live process's `/proc/PID/cmdline`, an exec record and a recording.
pub const MAX_ARGS: usize = 64;
pub const MAX_ARG_LEN: usize = 512;
pub const MAX_CMDLINE: usize = 4096;
/// Other strings of recorded JSON (pod names, the meta's lists), and entries of such lists.
pub const MAX_STRING: usize = 4096;
pub const MAX_LIST: usize = 4096;

use crate::text::cut;

/// A string deserialized without keeping more than `N` bytes of it.
pub struct CappedString<const N: usize>(pub String);

impl<'de, const N: usize> Deserialize<'de> for CappedString<N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const N: usize>;
        impl<const N: usize> Visitor<'_> for V<N> {
            type Value = CappedString<N>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(CappedString(cut(s, N).to_owned()))
            }
        }
        d.deserialize_str(V::<N>)
    }
}

/// A sequence deserialized keeping at most `N` items; the rest are read past (never
/// allocated) and counted in `dropped`.
pub struct CappedSeq<T, const N: usize> {
    pub items: Vec<T>,
    pub dropped: u64,
}

impl<T, const N: usize> Default for CappedSeq<T, N> {
    fn default() -> Self {
        CappedSeq {
            items: Vec::new(),
            dropped: 0,
        }
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for CappedSeq<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = CappedSeq<T, N>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = CappedSeq::default();
                loop {
                    if out.items.len() < N {
                        match seq.next_element::<T>()? {
                            Some(t) => out.items.push(t),
                            None => break,
                        }
                    } else if seq.next_element::<IgnoredAny>()?.is_some() {
                        out.dropped += 1;
                    } else {
                        break;
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V::<T, N>(std::marker::PhantomData))
    }
}

/// `comm`: at most [`MAX_COMM`] bytes.
pub fn comm<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    CappedString::<MAX_COMM>::deserialize(d).map(|s| s.0)
}

/// An optional path: at most [`MAX_PATH`] bytes.
pub fn opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<CappedString<MAX_PATH>>::deserialize(d).map(|s| s.map(|s| s.0))
}

/// Another string: at most [`MAX_STRING`] bytes.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    CappedString::<MAX_STRING>::deserialize(d).map(|s| s.0)
}

/// A list of strings: at most [`MAX_LIST`] of them, each at most [`MAX_STRING`] bytes.
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    CappedSeq::<CappedString<MAX_STRING>, MAX_LIST>::deserialize(d)
        .map(|s| s.items.into_iter().map(|s| s.0).collect())
}

/// A list of numbers (per-CPU counters): at most [`MAX_LIST`] of them.
pub fn numbers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    CappedSeq::<u64, MAX_LIST>::deserialize(d).map(|s| s.items)
}

/// A command line's arguments as [`crate::procinfo::split_cmdline`] keeps them: empty ones
/// dropped, at most [`MAX_ARGS`], each cut at [`MAX_ARG_LEN`] bytes, [`MAX_CMDLINE`] bytes in
/// all. A recorded list of millions of (empty) strings costs nothing.
pub fn cmdline<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of arguments")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut args = CmdlineBuilder::default();
            while let Some(s) = seq.next_element::<Arg>()? {
                args.push(&s.0);
            }
            Ok(args.args)
        }
    }
    d.deserialize_seq(V)
}

/// One argument, borrowed where the JSON has no escapes, cut at [`MAX_ARG_LEN`] bytes.
struct Arg(String);

impl<'de> Deserialize<'de> for Arg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        CappedString::<MAX_ARG_LEN>::deserialize(d).map(|s| Arg(s.0))
    }
}

/// Collects arguments within the command-line caps.
#[derive(Default)]
pub struct CmdlineBuilder {
    pub args: Vec<String>,
    bytes: usize,
}

impl CmdlineBuilder {
    /// Keeps `arg` (cut) if it is not empty and the caps leave room.
    pub fn push(&mut self, arg: &str) {
        if arg.is_empty() || self.args.len() >= MAX_ARGS || self.bytes >= MAX_CMDLINE {
            return;
        }
        let arg = cut(cut(arg, MAX_ARG_LEN), MAX_CMDLINE - self.bytes);
        self.bytes += arg.len();
        self.args.push(arg.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct P {
        #[serde(deserialize_with = "cmdline")]
        cmdline: Vec<String>,
        #[serde(deserialize_with = "comm")]
        comm: String,
        processes: CappedSeq<u32, 3>,
    }

    #[test]
    fn caps_hold_whatever_the_json_declares() {
        let empties = vec![""; 100_000].join("\",\"");
        let long = "é".repeat(10_000);
        let json = format!(
            "{{\"cmdline\":[\"{empties}\",\"a\",\"{long}\"],\"comm\":\"{long}\",\
             \"processes\":[1,2,3,4,5,6]}}"
        );
        let p: P = serde_json::from_str(&json).unwrap();
        assert_eq!(p.cmdline.len(), 2, "empty arguments are dropped");
        assert_eq!(p.cmdline[0], "a");
        assert!(p.cmdline[1].len() <= MAX_ARG_LEN && p.cmdline[1].len() >= MAX_ARG_LEN - 1);
        assert!(p.comm.len() <= MAX_COMM);
        assert_eq!((p.processes.items, p.processes.dropped), (vec![1, 2, 3], 3));
        let many = vec!["x"; 1000].join("\",\"");
        let p: P = serde_json::from_str(&format!(
            "{{\"cmdline\":[\"{many}\"],\"comm\":\"c\",\"processes\":[]}}"
        ))
        .unwrap();
        assert_eq!(p.cmdline.len(), MAX_ARGS);
    }

    #[test]
    fn the_command_line_is_cut_in_bytes_too() {
        let mut b = CmdlineBuilder::default();
        for _ in 0..MAX_ARGS {
            b.push(&"a".repeat(MAX_ARG_LEN * 2));
        }
        let total: usize = b.args.iter().map(String::len).sum();
        assert_eq!(total, MAX_CMDLINE);
        assert_eq!(b.args.len(), MAX_CMDLINE / MAX_ARG_LEN);
    }
}
