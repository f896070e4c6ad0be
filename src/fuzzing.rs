//! The cargo-fuzz targets (fuzz/fuzz_targets/) by name: the library driver each one wraps and
//! the seed inputs made from the committed fixtures. `scripts/fuzz` seeds its corpora with
//! them (examples/fuzz_seeds.rs) and tests/fuzz_regressions.rs replays the crash inputs kept in
//! tests/fixtures/fuzz-regressions/<target>/ through the same drivers.

use std::io;
use std::path::Path;

use crate::segfile::SegFile;

// The per-module drivers' shared helpers, by their former paths (the drivers import them from
// their own modules, never this registry back).
pub use crate::segfile::seg_direction;
pub use crate::xorshift::XorShift;

/// One fuzz target: `fuzz/fuzz_targets/<name>.rs` calls `drive`.
pub struct Target {
    pub name: &'static str,
    pub drive: fn(&[u8]),
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "parsers",
        drive: |d| {
            crate::protocols::fuzzing::drive(d);
        },
    },
    // A target per protocol whose parser is new, so it gets its ten million inputs in minutes
    // rather than the hours `parsers` takes through every parser.
    Target {
        name: "kafka",
        drive: |d| {
            crate::protocols::fuzzing::drive_protocol("kafka", d);
        },
    },
    Target {
        name: "mongodb",
        drive: |d| {
            crate::protocols::fuzzing::drive_protocol("mongodb", d);
        },
    },
    Target {
        name: "recording",
        drive: |d| {
            crate::record::fuzzing::drive(d);
        },
    },
    Target {
        name: "pipeline",
        drive: |d| {
            crate::pipeline::fuzzing::drive(d);
        },
    },
    Target {
        name: "go_binary",
        drive: crate::tls::golang::fuzzing::drive,
    },
    Target {
        name: "elf",
        drive: crate::tls::elf_fuzzing::drive,
    },
    Target {
        name: "plugin",
        drive: crate::plugins::fuzzing::drive,
    },
    Target {
        name: "symbols",
        drive: |d| {
            crate::profile::filesyms::fuzzing::drive(d);
        },
    },
];

pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The fixtures folder of each protocol in the registry (`src/protocols/<folder>/fixtures`
/// under the repository's root `root`), those that have one.
fn protocol_fixture_dirs(root: &Path) -> Vec<std::path::PathBuf> {
    crate::protocols::REGISTRY
        .iter()
        .map(|d| root.join("src/protocols").join(d.folder).join("fixtures"))
        .filter(|dir| dir.is_dir())
        .collect()
}

/// The `.seg` fixtures (real traffic) of every protocol under the repository's root `root`,
/// by file name (names are unique across the protocols).
pub fn seg_files(root: &Path) -> io::Result<Vec<(String, SegFile)>> {
    let mut out = Vec::new();
    for dir in protocol_fixture_dirs(root) {
        for (name, bytes) in files_with(&dir, "seg")? {
            let seg = SegFile::parse(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}/{name}: {e}", dir.display()),
                )
            })?;
            out.push((name, seg));
        }
    }
    Ok(out)
}

/// The `.ebt` recordings under the repository's root `root`: tests/fixtures/recordings and
/// the protocols' fixtures, by file name.
pub fn recordings(root: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = files_with(&root.join("tests/fixtures/recordings"), "ebt")?;
    for dir in protocol_fixture_dirs(root) {
        out.extend(files_with(&dir, "ebt")?);
    }
    out.sort();
    Ok(out)
}

fn files_with(dir: &Path, ext: &str) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == ext) {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into();
            out.push((name, std::fs::read(&path)?));
        }
    }
    out.sort();
    Ok(out)
}

/// Seed inputs of `target` (named, in its driver's input format) from the committed fixtures
/// under the repository's root `root`. Empty for a target that has none.
pub fn seeds(target: &str, root: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    match target {
        "parsers" => {
            for (name, seg) in seg_files(root)? {
                out.push((name, crate::protocols::fuzzing::seed_from_seg(&seg, 8192)));
            }
        }
        "kafka" | "mongodb" => {
            let dir = root.join("src/protocols").join(target).join("fixtures");
            for (name, bytes) in files_with(&dir, "seg")? {
                let seg = SegFile::parse(&bytes).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("{name}: {e}"))
                })?;
                out.push((name, crate::protocols::fuzzing::seed_from_seg(&seg, 8192)));
            }
        }
        "recording" => {
            out = recordings(root)?;
            // Kind 8 records alone, so mutations reach the profile record's reader.
            for (name, bytes) in recordings(root)? {
                if let Some(seed) = crate::record::fuzzing::profile_record_seed(&bytes) {
                    out.push((format!("{name}.profile_records"), seed));
                }
            }
        }
        "pipeline" => {
            let segs = seg_files(root)?;
            for (name, seg) in &segs {
                out.push((
                    name.clone(),
                    crate::pipeline::fuzzing::seed_from_segs(std::slice::from_ref(seg), 8),
                ));
            }
            // Small fixtures interleaved: several connections at once.
            let small: Vec<SegFile> = segs
                .into_iter()
                .map(|(_, s)| s)
                .filter(|s| s.entries.iter().map(|e| e.bytes.len()).sum::<usize>() < 4096)
                .take(7)
                .collect();
            out.push((
                "interleaved".into(),
                crate::pipeline::fuzzing::seed_from_segs(&small, 5),
            ));
            for (name, bytes) in recordings(root)? {
                if let Some(seed) = crate::pipeline::fuzzing::seed_from_recording(&bytes) {
                    out.push((name, seed));
                }
            }
        }
        "go_binary" => out = crate::tls::golang::fuzzing::seeds(),
        "elf" => out = crate::tls::elf_fuzzing::seeds(),
        "plugin" => out = crate::plugins::fuzzing::seeds(),
        "symbols" => out = crate::profile::filesyms::fuzzing::seeds(root)?,
        _ => {}
    }
    Ok(out)
}
