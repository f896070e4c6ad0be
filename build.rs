//! Compiles each `src/bpf/*.bpf.c` with clang into a libbpf skeleton embedded in the binary.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["sockdata", "sockcap", "flows", "procs", "infer"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    println!("cargo:rerun-if-changed=src/bpf/ebtop.h");
    println!("cargo:rerun-if-changed=src/bpf/vmlinux_min.h");
    println!("cargo:rerun-if-changed=src/bpf/filters.h");
    println!("cargo:rerun-if-changed=src/bpf/fdwalk.h");
    println!("cargo:rerun-if-changed=src/bpf/capture.h");
    println!("cargo:rerun-if-changed=src/bpf/sockaddr.h");
    println!("cargo:rerun-if-changed=src/bpf/flowtable.h");
    println!("cargo:rerun-if-changed=src/bpf/infer.h");
    println!("cargo:rerun-if-changed=src/bpf/tls.h");
    for name in PROGRAMS {
        let src = format!("src/bpf/{name}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        let skel = out.join(format!("{name}.skel.rs"));
        if let Err(err) = SkeletonBuilder::new()
            .source(&src)
            .clang_args(["-Wall", "-Wno-unused-function", "-Isrc/bpf"])
            .build_and_generate(&skel)
        {
            panic!("building BPF program {src} failed (is clang installed? see README): {err:#}");
        }
    }
}
