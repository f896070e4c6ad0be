//! Writes a fuzz target's seed inputs, made from the committed fixtures, into a corpus
//! directory (scripts/fuzz runs it before fuzzing):
//!
//!     cargo run --example fuzz_seeds -- TARGET DIR

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(target), Some(dir)) = (args.next(), args.next()) else {
        bail!("usage: fuzz_seeds TARGET DIR");
    };
    if ebtop::fuzzing::target(&target).is_none() {
        eprintln!("fuzz_seeds: no seeds for {target} (not in ebtop::fuzzing::TARGETS)");
        return Ok(());
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let seeds = ebtop::fuzzing::seeds(&target, root).context("reading the fixtures")?;
    std::fs::create_dir_all(&dir).with_context(|| dir.clone())?;
    for (name, bytes) in &seeds {
        let path = std::path::Path::new(&dir).join(format!("seed-{name}"));
        std::fs::write(&path, bytes).with_context(|| path.display().to_string())?;
    }
    println!("{} seeds for {target} in {dir}", seeds.len());
    Ok(())
}
