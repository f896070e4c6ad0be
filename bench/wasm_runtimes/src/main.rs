//! ns per call of ebtop's example plugins in wasmi and in wasmtime, the same input and fuel
//! accounting on in both (ebtop meters every call): json_code.wat's enrich on a 200 response
//! with a 256-byte JSON body (no code: the whole body scanned) and lenrpc.wat's frame call.
//! Medians of 15 batches.

use std::time::Instant;

const HEADER: usize = 96;

fn input() -> (Vec<u8>, usize) {
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 256\r\n\r\n";
    let mut body = br#"{"items": [1, 2, 3], "total": 3, "next": null, "note": ""#.to_vec();
    body.resize(255, b'x');
    body.push(b'}');
    let mut h = vec![0u8; HEADER];
    h[0] = 1;
    h[2] = 3;
    h[6..8].copy_from_slice(&(head.len() as u16).to_le_bytes());
    h[60..64].copy_from_slice(&200u32.to_le_bytes());
    h.extend_from_slice(head);
    h.extend_from_slice(&body);
    let n = h.len() - HEADER;
    (h, n)
}

fn frame_input() -> (Vec<u8>, usize) {
    let mut h = vec![0u8; HEADER];
    h[0] = 1;
    h[2] = 1;
    h.extend_from_slice(&[0, 0, 0, 21, 1, 0, 0, 4, 210]);
    (h, 9)
}

fn median(mut f: impl FnMut()) -> f64 {
    const N: u32 = 200_000;
    for _ in 0..N / 10 {
        f();
    }
    let mut v: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..N {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(N)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[7]
}

fn wat(name: &str) -> Vec<u8> {
    wat::parse_file(format!(
        "{}/../../examples/plugins/{name}.wat",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[cfg(feature = "wasmi")]
fn run_wasmi(module: &[u8], export: &str, input: &(Vec<u8>, usize), want: i64) -> f64 {
    use wasmi::*;
    let mut config = Config::default();
    config.consume_fuel(true);
    let engine = Engine::new(&config);
    let m = Module::new(&engine, module).unwrap();
    let mut store = Store::new(&engine, ());
    store.set_fuel(u64::MAX / 2).unwrap();
    let i = Linker::new(&engine).instantiate_and_start(&mut store, &m).unwrap();
    let mem = i.get_memory(&store, "memory").unwrap();
    let buf = i.get_typed_func::<(), i32>(&store, "ebtop_buffer").unwrap().call(&mut store, ()).unwrap() as usize;
    mem.data_mut(&mut store)[buf..buf + input.0.len()].copy_from_slice(&input.0);
    let n = input.1 as i32;
    if export == "ebtop_frame" {
        let f = i.get_typed_func::<i32, i64>(&store, export).unwrap();
        assert_eq!(f.call(&mut store, n).unwrap(), want);
        median(|| {
            store.set_fuel(1_000_000).unwrap();
            std::hint::black_box(f.call(&mut store, n).unwrap());
        })
    } else {
        let f = i.get_typed_func::<i32, i32>(&store, export).unwrap();
        assert_eq!(i64::from(f.call(&mut store, n).unwrap()), want);
        median(|| {
            store.set_fuel(1_000_000).unwrap();
            std::hint::black_box(f.call(&mut store, n).unwrap());
        })
    }
}

#[cfg(feature = "wasmtime")]
fn run_wasmtime(module: &[u8], export: &str, input: &(Vec<u8>, usize), want: i64) -> f64 {
    use wasmtime::*;
    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config).unwrap();
    let m = Module::new(&engine, module).unwrap();
    let mut store = Store::new(&engine, ());
    store.set_fuel(u64::MAX / 2).unwrap();
    let i = Linker::new(&engine).instantiate(&mut store, &m).unwrap();
    let mem = i.get_memory(&mut store, "memory").unwrap();
    let buf = i.get_typed_func::<(), i32>(&mut store, "ebtop_buffer").unwrap().call(&mut store, ()).unwrap() as usize;
    mem.data_mut(&mut store)[buf..buf + input.0.len()].copy_from_slice(&input.0);
    let n = input.1 as i32;
    if export == "ebtop_frame" {
        let f = i.get_typed_func::<i32, i64>(&mut store, export).unwrap();
        assert_eq!(f.call(&mut store, n).unwrap(), want);
        median(|| {
            store.set_fuel(1_000_000).unwrap();
            std::hint::black_box(f.call(&mut store, n).unwrap());
        })
    } else {
        let f = i.get_typed_func::<i32, i32>(&mut store, export).unwrap();
        assert_eq!(i64::from(f.call(&mut store, n).unwrap()), want);
        median(|| {
            store.set_fuel(1_000_000).unwrap();
            std::hint::black_box(f.call(&mut store, n).unwrap());
        })
    }
}

fn main() {
    let cases = [
        ("json_code enrich, 256-byte body scanned", wat("json_code"), "ebtop_enrich", input(), 0i64),
        ("lenrpc frame, 9-byte header", wat("lenrpc"), "ebtop_frame", frame_input(), 16i64),
    ];
    for (what, module, export, inp, want) in &cases {
        #[cfg(feature = "wasmi")]
        println!("wasmi    {what}: {:.0} ns/call", run_wasmi(module, export, inp, *want));
        #[cfg(feature = "wasmtime")]
        println!("wasmtime {what}: {:.0} ns/call", run_wasmtime(module, export, inp, *want));
        let _ = (what, module, export, inp, want);
    }
}
