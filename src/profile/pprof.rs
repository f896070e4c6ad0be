//! A profile as gzipped pprof (`profile.proto` of github.com/google/pprof), for `go tool pprof`,
//! Pyroscope and Grafana. The few messages it needs are encoded here by hand (protobuf varints
//! and length-delimited fields), so no generated code or protoc is involved.
//!
//! One location and one function per frame name (ebtop names frames when it reads them, so a
//! profile needs no binaries later); each sample's locations are leaf first, with the process
//! (`comm-pid`, as in the folded files) as the root frame and a `pid` label (and a `tid` label
//! with `--profile-threads`).

use std::collections::HashMap;
use std::io::{self, Write};

use super::{kind_name, Profile};

/// Protobuf wire types.
const VARINT: u32 = 0;
const LEN: u32 = 2;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn uint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, VARINT);
        varint(out, v);
    }
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn packed_field(out: &mut Vec<u8>, field: u32, values: impl Iterator<Item = u64>) {
    let mut body = Vec::new();
    for v in values {
        varint(&mut body, v);
    }
    bytes_field(out, field, &body);
}

/// The string table: index 0 is "" (pprof's rule).
struct Strings {
    index: HashMap<String, u64>,
    table: Vec<String>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            index: HashMap::from([(String::new(), 0)]),
            table: vec![String::new()],
        }
    }

    fn id(&mut self, s: &str) -> u64 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as u64;
        self.index.insert(s.to_owned(), i);
        self.table.push(s.to_owned());
        i
    }
}

fn value_type(strings: &mut Strings, ty: &str, unit: &str) -> Vec<u8> {
    let mut m = Vec::new();
    uint_field(&mut m, 1, strings.id(ty));
    uint_field(&mut m, 2, strings.id(unit));
    m
}

/// The pprof `Profile` message of one side of `profile` (on-CPU: samples and CPU time at
/// 1/hz per sample; off-CPU: blocks and nanoseconds, the state as a frame above the process).
pub fn encode(profile: &Profile, on_cpu: bool, time_nanos: u64, duration_nanos: u64) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Vec::new();
    let period_ns = if profile.hz > 0 {
        1_000_000_000 / u64::from(profile.hz)
    } else {
        0
    };
    let types: [(&str, &str); 2] = if on_cpu {
        [("samples", "count"), ("cpu", "nanoseconds")]
    } else {
        [("blocks", "count"), ("off_cpu", "nanoseconds")]
    };
    for (ty, unit) in types {
        let vt = value_type(&mut strings, ty, unit);
        bytes_field(&mut out, 1, &vt);
    }
    // Functions and locations: one per distinct name, ids from 1.
    let mut functions: HashMap<String, u64> = HashMap::new();
    let mut function_order: Vec<(u64, u64)> = Vec::new(); // (id, name string id)
    let mut location_of = |name: &str, strings: &mut Strings| -> u64 {
        if let Some(id) = functions.get(name) {
            return *id;
        }
        let id = functions.len() as u64 + 1;
        functions.insert(name.to_owned(), id);
        function_order.push((id, strings.id(name)));
        id
    };
    let pid_key = strings.id("pid");
    let mut stacks: Vec<_> = profile
        .stacks
        .iter()
        .filter(|(k, _)| k.kind.is_on_cpu() == on_cpu)
        .collect();
    stacks.sort_by(|a, b| {
        (a.0.tgid, a.0.tid, a.0.kind, &a.0.frames).cmp(&(b.0.tgid, b.0.tid, b.0.kind, &b.0.frames))
    });
    for (k, t) in stacks {
        let comm = profile
            .processes
            .get(&k.tgid)
            .map_or("?", |p| p.comm.as_str());
        let mut ids: Vec<u64> = k
            .frames
            .iter()
            .rev()
            .map(|f| location_of(f, &mut strings))
            .collect();
        if !on_cpu {
            ids.push(location_of(
                &format!("[{}]", kind_name(k.kind)),
                &mut strings,
            ));
        }
        ids.push(location_of(&format!("{comm}-{}", k.tgid), &mut strings));
        let values = if on_cpu {
            [t.count, t.count.saturating_mul(period_ns)]
        } else {
            [t.count, t.ns]
        };
        let mut sample = Vec::new();
        packed_field(&mut sample, 1, ids.into_iter());
        packed_field(&mut sample, 2, values.into_iter());
        let mut label = Vec::new();
        uint_field(&mut label, 1, pid_key);
        uint_field(&mut label, 3, u64::from(k.tgid));
        bytes_field(&mut sample, 3, &label);
        if let Some(tid) = k.tid {
            let mut label = Vec::new();
            uint_field(&mut label, 1, strings.id("tid"));
            uint_field(&mut label, 3, u64::from(tid));
            bytes_field(&mut sample, 3, &label);
        }
        bytes_field(&mut out, 2, &sample);
    }
    for (id, _) in &function_order {
        let mut line = Vec::new();
        uint_field(&mut line, 1, *id);
        let mut loc = Vec::new();
        uint_field(&mut loc, 1, *id);
        bytes_field(&mut loc, 4, &line);
        bytes_field(&mut out, 4, &loc);
    }
    for (id, name) in &function_order {
        let mut f = Vec::new();
        uint_field(&mut f, 1, *id);
        uint_field(&mut f, 2, *name);
        uint_field(&mut f, 3, *name);
        bytes_field(&mut out, 5, &f);
    }
    // The period's type: its strings are in the table already (the first sample type's).
    let period_type = on_cpu.then(|| value_type(&mut strings, "cpu", "nanoseconds"));
    for s in &strings.table {
        bytes_field(&mut out, 6, s.as_bytes());
    }
    uint_field(&mut out, 9, time_nanos);
    uint_field(&mut out, 10, duration_nanos);
    if let Some(pt) = period_type {
        bytes_field(&mut out, 11, &pt);
        uint_field(&mut out, 12, period_ns);
    }
    out
}

/// Writes `encode(..)` gzipped.
pub fn write_gz(
    profile: &Profile,
    on_cpu: bool,
    time_nanos: u64,
    duration_nanos: u64,
    w: impl Write,
) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&encode(profile, on_cpu, time_nanos, duration_nanos))?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Kind, StackKey, Tally};

    /// Top-level or nested fields of a message: (field, varint value or bytes).
    fn fields(mut b: &[u8]) -> Vec<(u32, u64, &[u8])> {
        fn read_varint(b: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let k = read_varint(&mut b);
            let (field, wire) = ((k >> 3) as u32, (k & 7) as u32);
            if wire == VARINT {
                out.push((field, read_varint(&mut b), &[][..]));
            } else {
                assert_eq!(wire, LEN);
                let n = read_varint(&mut b) as usize;
                out.push((field, 0, &b[..n]));
                b = &b[n..];
            }
        }
        out
    }

    fn packed(b: &[u8]) -> Vec<u64> {
        let mut v = Vec::new();
        let mut rest = b;
        while !rest.is_empty() {
            let mut x = 0u64;
            let mut shift = 0;
            loop {
                let byte = rest[0];
                rest = &rest[1..];
                x |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    break;
                }
                shift += 7;
            }
            v.push(x);
        }
        v
    }

    #[test]
    fn pprof_samples_decode_to_the_profiles_stacks_and_values() {
        let mut p = Profile {
            hz: 100,
            ..Default::default()
        };
        let k = |frames: &[&str]| StackKey {
            tgid: 42,
            tid: None,
            kind: Kind::OnCpu,
            frames: frames.iter().map(|f| Frame::from(*f)).collect(),
        };
        p.add(k(&["main", "a"]), "prog", Tally { count: 3, ns: 0 });
        p.add(
            k(&["main", "b", "do_sys_[k]"]),
            "prog",
            Tally { count: 200, ns: 0 },
        );
        let bytes = encode(&p, true, 1_700_000_000_000_000_000, 5_000_000_000);
        let top = fields(&bytes);
        let strings: Vec<&str> = top
            .iter()
            .filter(|f| f.0 == 6)
            .map(|f| std::str::from_utf8(f.2).unwrap())
            .collect();
        assert_eq!(strings[0], "");
        let functions: HashMap<u64, &str> = top
            .iter()
            .filter(|f| f.0 == 5)
            .map(|f| {
                let m = fields(f.2);
                let id = m.iter().find(|x| x.0 == 1).unwrap().1;
                let name = m.iter().find(|x| x.0 == 2).unwrap().1;
                (id, strings[name as usize])
            })
            .collect();
        let locations: HashMap<u64, u64> = top
            .iter()
            .filter(|f| f.0 == 4)
            .map(|f| {
                let m = fields(f.2);
                let id = m.iter().find(|x| x.0 == 1).unwrap().1;
                let line = fields(m.iter().find(|x| x.0 == 4).unwrap().2);
                (id, line[0].1)
            })
            .collect();
        let mut samples: Vec<(Vec<&str>, Vec<u64>)> = top
            .iter()
            .filter(|f| f.0 == 2)
            .map(|f| {
                let m = fields(f.2);
                let locs = packed(m.iter().find(|x| x.0 == 1).unwrap().2);
                let values = packed(m.iter().find(|x| x.0 == 2).unwrap().2);
                let names = locs.iter().map(|l| functions[&locations[l]]).collect();
                (names, values)
            })
            .collect();
        samples.sort();
        assert_eq!(
            samples,
            [
                (vec!["a", "main", "prog-42"], vec![3, 30_000_000]),
                (
                    vec!["do_sys_[k]", "b", "main", "prog-42"],
                    vec![200, 2_000_000_000]
                ),
            ]
        );
        let period = top.iter().find(|f| f.0 == 12).unwrap().1;
        assert_eq!(period, 10_000_000);
        assert_eq!(top.iter().find(|f| f.0 == 10).unwrap().1, 5_000_000_000);
        // Kept per thread: each sample also has a `tid` label.
        let mut with_tid = k(&["main", "a"]);
        with_tid.tid = Some(43);
        let mut p = Profile::default();
        p.add(with_tid, "prog", Tally { count: 1, ns: 0 });
        let bytes = encode(&p, true, 0, 1);
        let top = fields(&bytes);
        let strings: Vec<&str> = top
            .iter()
            .filter(|f| f.0 == 6)
            .map(|f| std::str::from_utf8(f.2).unwrap())
            .collect();
        let sample = fields(top.iter().find(|f| f.0 == 2).unwrap().2);
        let labels: Vec<(&str, u64)> = sample
            .iter()
            .filter(|x| x.0 == 3)
            .map(|x| {
                let l = fields(x.2);
                let key = l.iter().find(|y| y.0 == 1).unwrap().1;
                (
                    strings[key as usize],
                    l.iter().find(|y| y.0 == 3).unwrap().1,
                )
            })
            .collect();
        assert_eq!(labels, [("pid", 42), ("tid", 43)]);
    }
}
