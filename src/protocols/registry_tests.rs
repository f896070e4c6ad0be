//! The registry is the one list of protocols: every folder is in it, and each protocol's kernel
//! rule (its `infer.h`) agrees with its descriptor.

use super::{ProtoSet, Protocol, REGISTRY};

fn protocols_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocols")
}

/// The `id=` of a folder's kernel rule line, if it has an `infer.h`.
fn rule_id(folder: &str) -> Option<u8> {
    let text = std::fs::read_to_string(protocols_dir().join(folder).join("infer.h")).ok()?;
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("/* ebtop-kernel-rule:"))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("id="))
        .map(|id| id.parse().expect("a numeric id"))
}

#[test]
fn every_protocol_folder_is_in_the_registry_and_holds_its_parts() {
    let mut folders = Vec::new();
    for entry in std::fs::read_dir(protocols_dir()).unwrap() {
        let path = entry.unwrap().path();
        let mod_rs = path.join("mod.rs");
        // A protocol's folder is one whose parser declares its descriptor.
        if std::fs::read_to_string(&mod_rs).is_ok_and(|s| s.contains("pub const DESCRIPTOR")) {
            folders.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    folders.sort();
    let mut listed: Vec<String> = REGISTRY.iter().map(|d| d.folder.to_owned()).collect();
    listed.sort();
    assert_eq!(folders, listed, "protocol folders vs REGISTRY");
    for d in REGISTRY {
        let dir = protocols_dir().join(d.folder);
        assert!(
            dir.join("fixtures").is_dir(),
            "{}: no fixtures/ folder",
            d.folder
        );
        assert_eq!(
            rule_id(d.folder),
            d.kernel_id,
            "{}: infer.h id vs kernel_id",
            d.folder
        );
        for b in d.benches {
            assert!(dir.join("fixtures").join(b.file).is_file(), "{}", b.file);
        }
    }
}

#[test]
fn names_are_unique_and_match_the_json_names() {
    let names: Vec<&str> = Protocol::all().map(Protocol::name).collect();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    for p in Protocol::all() {
        assert_eq!(Protocol::from_name(p.name()), Some(p));
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            format!("\"{}\"", p.name())
        );
        assert!(p.descriptor().calls.iter().any(|k| k.proto == p));
    }
    let titles: Vec<&str> = REGISTRY.iter().map(|d| d.title).collect();
    assert!(titles.iter().all(|t| !t.is_empty()), "{titles:?}");
}

#[test]
fn the_kernel_mask_holds_the_ids_of_the_protocols_chosen() {
    assert_eq!(ProtoSet::of(Some(&[Protocol::Redis])).kernel_mask(), 1 << 2);
    // gRPC's connections are HTTP/2's to the kernel.
    assert_eq!(
        ProtoSet::of(Some(&[Protocol::Grpc])).kernel_mask(),
        ProtoSet::of(Some(&[Protocol::Http2])).kernel_mask()
    );
    let all = ProtoSet::default().kernel_mask();
    for d in REGISTRY {
        if let Some(id) = d.kernel_id {
            assert_ne!(all & 1 << id, 0, "{}", d.folder);
        }
    }
}

/// The calls each benchmark fixture gives its parser (what benches/parsers.rs asserts before
/// timing it), checked here so a benchmark never times a parser that finds nothing.
#[test]
fn benchmark_fixtures_give_the_calls_their_descriptors_say() {
    use super::{ParseDepth, ParseStats, ParserConfig, Segment, Transport};
    use crate::segfile::SegFile;
    for d in REGISTRY {
        for b in d.benches {
            let path = protocols_dir().join(d.folder).join("fixtures").join(b.file);
            let f = SegFile::parse(&std::fs::read(&path).unwrap()).unwrap();
            let mut p = (d.new_parser)(&ParserConfig {
                depth: ParseDepth::Full,
                transport: Transport::Stream,
                keep_head: 0,
            });
            let (mut out, mut stats) = (Vec::new(), ParseStats::default());
            for (i, e) in f.entries.iter().enumerate() {
                let seg = Segment {
                    dir: crate::segfile::seg_direction(&f, e.to_server),
                    payload: &e.bytes,
                    tail: &[],
                    total_len: e.total_len,
                    start_ns: i as u64 * 1000,
                    end_ns: i as u64 * 1000 + 10,
                    peer: None,
                    pos: 0,
                };
                p.on_segment(&seg, &mut out, &mut stats);
            }
            p.on_close(&mut out, &mut stats);
            assert_eq!(out.len(), b.calls, "{}", path.display());
        }
    }
}
