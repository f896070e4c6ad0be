//! The filters of a run (`--pid`, `--comm`, `--port`, `--cgroup`, `--proto`): what a session
//! selects, recorded in its `meta` line and a recording's header.

use crate::protocols::{ProtoSet, Protocol};

/// Filters of a run; applied in the kernel when live, by the pipeline when replaying.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Filters {
    /// Any of these processes (`--pid`, a list; recordings before lists hold one number).
    #[serde(default, deserialize_with = "one_or_many")]
    pub pid: Option<Vec<u32>>,
    /// Any of these task names.
    #[serde(default, deserialize_with = "one_or_many")]
    pub comm: Option<Vec<String>>,
    /// Any of these local or remote ports.
    #[serde(default, deserialize_with = "one_or_many")]
    pub port: Option<Vec<u16>>,
    /// Live: only processes in these cgroups (v2 paths) or beneath them (`--cgroup`,
    /// `--container`); applied in the kernel to calls and process records, not to flows.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "one_or_many"
    )]
    pub cgroup: Option<Vec<String>>,
    /// Only connections of these application protocols (`--proto`); flows are not affected.
    #[serde(default)]
    pub proto: Option<Vec<Protocol>>,
}

/// Most values of one filter (`--pid`, `--comm`, `--port`): the kernel compares each in
/// every program run.
pub const MAX_FILTER_VALUES: usize = 8;

/// `null`, one value (recordings made before filters took lists) or a list; a recorded list
/// is read within the read budget (at most `record::limits::MAX_LIST` values, the rest
/// read past), never buffered whole.
fn one_or_many<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    use serde::de::value::{I64Deserializer, StrDeserializer, U64Deserializer};
    use serde::de::{Error, SeqAccess, Visitor};
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Option<Vec<T>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("null, a value or a list")
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(self)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<Self::Value, E> {
            T::deserialize(U64Deserializer::<E>::new(v)).map(|t| Some(vec![t]))
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<Self::Value, E> {
            T::deserialize(I64Deserializer::<E>::new(v)).map(|t| Some(vec![t]))
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
            T::deserialize(StrDeserializer::<E>::new(v)).map(|t| Some(vec![t]))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            let capped: crate::record::limits::CappedSeq<T, { crate::record::limits::MAX_LIST }> =
                serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
            Ok(Some(capped.items))
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

/// Whether an optional list filter lets `v` through (unset: everything).
fn passes<T: PartialEq>(filter: &Option<Vec<T>>, v: impl Fn(&T) -> bool) -> bool {
    filter.as_ref().is_none_or(|list| list.iter().any(v))
}

/// Both lists' common values; one list if the other is unset.
fn intersect<T: PartialEq + Clone>(a: &Option<Vec<T>>, b: &Option<Vec<T>>) -> Option<Vec<T>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.iter().filter(|v| b.contains(v)).cloned().collect()),
        (a, b) => b.clone().or_else(|| a.clone()),
    }
}

/// The kernel keeps 15 bytes of a task name: a longer `--comm` matches on that prefix (bytes,
/// not characters: a name may be cut inside a UTF-8 sequence).
pub fn comm_prefix(c: &str) -> &[u8] {
    &c.as_bytes()[..c.len().min(15)]
}

impl Filters {
    /// Whether a flow (or anything else known by its ports and owner) passes the filters.
    /// The comm filter compares the kernel's 15-byte task name.
    pub fn selects(
        &self,
        local_port: u16,
        peer_port: Option<u16>,
        pid: Option<u32>,
        comm: Option<&str>,
    ) -> bool {
        passes(&self.port, |&p| local_port == p || peer_port == Some(p))
            && passes(&self.pid, |&p| pid == Some(p))
            && passes(&self.comm, |c| {
                comm.is_some_and(|have| have.as_bytes() == comm_prefix(c))
            })
    }

    /// Whether a connection between these ports passes `--port`.
    pub fn selects_ports(&self, a: u16, b: u16) -> bool {
        passes(&self.port, |&p| p == a || p == b)
    }

    /// Whether a process (pid, kernel task name NUL-padded) passes `--pid` and `--comm`.
    pub fn selects_process(&self, pid: u32, comm: &[u8; 16]) -> bool {
        let have = comm.iter().position(|&b| b == 0).unwrap_or(16);
        passes(&self.pid, |&p| p == pid) && passes(&self.comm, |c| &comm[..have] == comm_prefix(c))
    }

    /// Whether the filters that apply to flows (all but `proto`) are all unset.
    pub fn is_empty(&self) -> bool {
        self.pid.is_none() && self.comm.is_none() && self.port.is_none()
    }

    /// The filters as the command-line options that set them (`--port 42999 --proto dns`);
    /// empty when nothing is filtered.
    pub fn as_options(&self) -> String {
        fn list<T: ToString>(out: &mut Vec<String>, name: &str, values: &Option<Vec<T>>) {
            if let Some(v) = values {
                let v: Vec<String> = v.iter().map(T::to_string).collect();
                out.push(format!("--{name} {}", v.join(",")));
            }
        }
        let mut out = Vec::new();
        list(&mut out, "pid", &self.pid);
        list(&mut out, "comm", &self.comm);
        list(&mut out, "port", &self.port);
        list(&mut out, "cgroup", &self.cgroup);
        if let Some(p) = &self.proto {
            let names: Vec<&str> = p.iter().map(|p| p.name()).collect();
            out.push(format!("--proto {}", names.join(",")));
        }
        out.join(" ")
    }

    pub fn protocols(&self) -> ProtoSet {
        ProtoSet::of(self.proto.as_deref())
    }

    /// These filters narrowed by `more` (a filtered copy of a filtered recording): a filter
    /// set on both sides keeps the values both allow (none in common: nothing passes).
    pub fn narrowed_by(&self, more: &Filters) -> Filters {
        Filters {
            pid: intersect(&self.pid, &more.pid),
            comm: intersect(&self.comm, &more.comm),
            port: intersect(&self.port, &more.port),
            cgroup: intersect(&self.cgroup, &more.cgroup),
            proto: intersect(&self.proto, &more.proto),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_lists_and_read_recordings_that_held_one_value() {
        let old: Filters =
            serde_json::from_str(r#"{"pid":42,"comm":"nginx","port":null}"#).unwrap();
        assert_eq!(old.pid, Some(vec![42]));
        assert_eq!(old.comm, Some(vec!["nginx".to_owned()]));
        assert_eq!(old.port, None);
        assert_eq!(old.proto, None);
        let new: Filters =
            serde_json::from_str(r#"{"pid":[1,2],"comm":null,"port":[80,443]}"#).unwrap();
        assert_eq!(new.pid, Some(vec![1, 2]));
        let back: Filters = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);

        assert!(new.selects(443, None, Some(2), None));
        assert!(new.selects(5000, Some(80), Some(1), Some("x")));
        assert!(!new.selects(5000, Some(81), Some(1), None));
        assert!(!new.selects(80, None, Some(3), None));
        let mut comm = [0u8; 16];
        comm[..5].copy_from_slice(b"nginx");
        assert!(old.selects_process(42, &comm));
        assert!(!old.selects_process(43, &comm));

        // Narrowing keeps what both allow.
        let n = new.narrowed_by(&Filters {
            port: Some(vec![443, 8080]),
            ..Filters::default()
        });
        assert_eq!((n.pid, n.port), (Some(vec![1, 2]), Some(vec![443])));
        let none = old.narrowed_by(&Filters {
            pid: Some(vec![7]),
            ..Filters::default()
        });
        assert_eq!(none.pid, Some(vec![]));
        assert!(!none.selects_process(42, &comm) && !none.selects_process(7, &comm));
    }
}
