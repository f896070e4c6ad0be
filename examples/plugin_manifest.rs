//! Appends the `ebtop.plugin` custom section (the manifest) to a module built by a toolchain
//! that cannot emit one, Go's for instance (docs/plugins.md): what the tests do.
//! Usage: cargo run --example plugin_manifest -- IN.wasm 'name=x\nabi=1\n…' OUT.wasm
//! (`\n` in the manifest argument stands for a newline).

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, manifest, output] = args.as_slice() else {
        anyhow::bail!("usage: plugin_manifest IN.wasm MANIFEST OUT.wasm");
    };
    let module = std::fs::read(input)?;
    let manifest = manifest.replace("\\n", "\n");
    // Checked as ebtop will read it.
    let out = ebtop::plugins::manifest::with_section(&module, &manifest);
    ebtop::plugins::manifest::read(&out).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(output, out)?;
    Ok(())
}
