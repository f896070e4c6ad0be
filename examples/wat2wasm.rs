//! Compiles a plugin written in WebAssembly text (examples/plugins/*.wat) to a module that
//! `ebtop --plugin` loads, custom sections (the manifest) included: what the tests do.
//! Usage: cargo run --example wat2wasm -- IN.wat OUT.wasm

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        anyhow::bail!("usage: wat2wasm IN.wat OUT.wasm");
    };
    let wasm = wat::parse_file(input)?;
    std::fs::write(output, wasm)?;
    Ok(())
}
