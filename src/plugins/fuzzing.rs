//! The `plugin` fuzz target's driver: any bytes as a plugin file's manifest (the module's
//! section walk and the `key=value` text) and as a guest's answers (the call-half layout and
//! `ebtop_frame`'s codes) — the readers of what a plugin hands ebtop — and, through
//! [`drive_host`], as the script of a real guest whose answers the host acts on (framing,
//! pairing, parts, faults and disabling of a parse plugin; an enrich plugin's changes to
//! HTTP/1 calls). Nothing may panic, and every read is linear in the input.

use super::{abi, manifest};

pub fn drive(data: &[u8]) {
    drive_host(SCRIPTED_WASM, data);
    let _ = manifest::read(data);
    let _ = manifest::parse(data);
    let _ = abi::answer(data);
    if let Some(b) = data.get(..8) {
        let r = i64::from_le_bytes(b.try_into().expect("8 bytes"));
        let _ = abi::frame_answer(r, crate::protocols::framing::MAX_HEADER);
    }
}

/// A module of an empty type section and a custom section `name` holding `payload`.
fn module_with(name: &str, payload: &[u8]) -> Vec<u8> {
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    m.extend_from_slice(&[1, 1, 0]);
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    m.push(0);
    let mut n = body.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            m.push(byte);
            break;
        }
        m.push(byte | 0x80);
    }
    m.extend_from_slice(&body);
    m
}

/// Seeds: the manifests of the example plugins in modules, and answers of each kind.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let answer = abi::Answer {
        kind: abi::HALF_REQUEST,
        outcome: Some(crate::protocols::Outcome::Ok),
        status: Some(3),
        pair_key: 9,
        method: "GET".into(),
        resource: "/orders".into(),
        status_text: Some("E42".into()),
        attrs: vec![("order_id".into(), "17".into())],
    };
    let mut seeds = host_seeds();
    seeds.extend([
        (
            "parse_manifest".into(),
            module_with(
                manifest::SECTION,
                b"name=lenrpc\nabi=1\nkind=parse\nports=7878,7879\n",
            ),
        ),
        (
            "enrich_manifest".into(),
            module_with(
                manifest::SECTION,
                b"name=json_code\nabi=1\nkind=enrich\nenrich=http\n",
            ),
        ),
        ("answer".into(), abi::encode_answer(&answer)),
        (
            "answer_part".into(),
            abi::encode_answer(&abi::Answer {
                kind: abi::HALF_PART,
                outcome: None,
                ..Default::default()
            }),
        ),
        (
            "frame_need".into(),
            (abi::FRAME_NEED | 9).to_le_bytes().to_vec(),
        ),
    ]);
    seeds
}

/// The guest of [`drive_host`]: it answers from a script the driver appends to it as a data
/// segment (so any answer, valid or not, reaches the host as a real guest's would). At
/// `SCRIPT` (u32s): frame answers, the next frame answer's index, where the message answers
/// start and end, and the next one. Frame answers are i64s from `SCRIPT + 32`, handed out in
/// turn; message (and enrich) answers are `[i32 return][u32 n][n bytes]` entries copied to
/// the buffer's start, in turn. A return of [`TRAP`] traps; [`SPIN`] loops until its fuel runs
/// out. The manifest is appended as well, so the same template is a parse or an enrich plugin.
pub const SCRIPTED_WAT: &str = r#"(module
  (memory (export "memory") 4)
  (func (export "ebtop_buffer") (result i32) (i32.const 0x10000))
  (func (export "ebtop_frame") (param $len i32) (result i64)
    (local $i i32)
    (if (i32.eqz (i32.load (i32.const 0x20000))) (then (return (i64.const -1))))
    (local.set $i (i32.load (i32.const 0x20004)))
    (i32.store (i32.const 0x20004)
      (i32.rem_u (i32.add (local.get $i) (i32.const 1)) (i32.load (i32.const 0x20000))))
    (i64.load (i32.add (i32.const 0x20020) (i32.shl (local.get $i) (i32.const 3)))))
  (func $answer (result i32)
    (local $p i32) (local $r i32) (local $n i32)
    (local.set $p (i32.load (i32.const 0x20010)))
    (if (i32.ge_u (local.get $p) (i32.load (i32.const 0x2000c)))
      (then (local.set $p (i32.load (i32.const 0x20008)))))
    (if (i32.ge_u (local.get $p) (i32.load (i32.const 0x2000c)))
      (then (return (i32.const 0))))
    (local.set $r (i32.load (local.get $p)))
    (local.set $n (i32.load offset=4 (local.get $p)))
    (i32.store (i32.const 0x20010) (i32.add (i32.add (local.get $p) (i32.const 8)) (local.get $n)))
    (if (i32.eq (local.get $r) (i32.const 0x7ffffff0)) (then unreachable))
    (if (i32.eq (local.get $r) (i32.const 0x7ffffff1)) (then (loop $l (br $l))))
    (memory.copy (i32.const 0x10000) (i32.add (local.get $p) (i32.const 8)) (local.get $n))
    (local.get $r))
  (func (export "ebtop_message") (param $len i32) (result i32) (call $answer))
  (func (export "ebtop_enrich") (param $len i32) (result i32) (call $answer)))"#;

/// [`SCRIPTED_WAT`] compiled (the library has no WAT compiler; a test checks they agree).
#[rustfmt::skip]
pub const SCRIPTED_WASM: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x0f, 0x03, 0x60, 0x00, 0x01, 0x7f, 0x60,
    0x01, 0x7f, 0x01, 0x7e, 0x60, 0x01, 0x7f, 0x01, 0x7f, 0x03, 0x06, 0x05, 0x00, 0x01, 0x00, 0x02,
    0x02, 0x05, 0x03, 0x01, 0x00, 0x04, 0x07, 0x46, 0x05, 0x06, 0x6d, 0x65, 0x6d, 0x6f, 0x72, 0x79,
    0x02, 0x00, 0x0c, 0x65, 0x62, 0x74, 0x6f, 0x70, 0x5f, 0x62, 0x75, 0x66, 0x66, 0x65, 0x72, 0x00,
    0x00, 0x0b, 0x65, 0x62, 0x74, 0x6f, 0x70, 0x5f, 0x66, 0x72, 0x61, 0x6d, 0x65, 0x00, 0x01, 0x0d,
    0x65, 0x62, 0x74, 0x6f, 0x70, 0x5f, 0x6d, 0x65, 0x73, 0x73, 0x61, 0x67, 0x65, 0x00, 0x03, 0x0c,
    0x65, 0x62, 0x74, 0x6f, 0x70, 0x5f, 0x65, 0x6e, 0x72, 0x69, 0x63, 0x68, 0x00, 0x04, 0x0a, 0xcf,
    0x01, 0x05, 0x06, 0x00, 0x41, 0x80, 0x80, 0x04, 0x0b, 0x3c, 0x01, 0x01, 0x7f, 0x41, 0x80, 0x80,
    0x08, 0x28, 0x02, 0x00, 0x45, 0x04, 0x40, 0x42, 0x7f, 0x0f, 0x0b, 0x41, 0x84, 0x80, 0x08, 0x28,
    0x02, 0x00, 0x21, 0x01, 0x41, 0x84, 0x80, 0x08, 0x20, 0x01, 0x41, 0x01, 0x6a, 0x41, 0x80, 0x80,
    0x08, 0x28, 0x02, 0x00, 0x70, 0x36, 0x02, 0x00, 0x41, 0xa0, 0x80, 0x08, 0x20, 0x01, 0x41, 0x03,
    0x74, 0x6a, 0x29, 0x03, 0x00, 0x0b, 0x7f, 0x01, 0x03, 0x7f, 0x41, 0x90, 0x80, 0x08, 0x28, 0x02,
    0x00, 0x21, 0x00, 0x20, 0x00, 0x41, 0x8c, 0x80, 0x08, 0x28, 0x02, 0x00, 0x4f, 0x04, 0x40, 0x41,
    0x88, 0x80, 0x08, 0x28, 0x02, 0x00, 0x21, 0x00, 0x0b, 0x20, 0x00, 0x41, 0x8c, 0x80, 0x08, 0x28,
    0x02, 0x00, 0x4f, 0x04, 0x40, 0x41, 0x00, 0x0f, 0x0b, 0x20, 0x00, 0x28, 0x02, 0x00, 0x21, 0x01,
    0x20, 0x00, 0x28, 0x02, 0x04, 0x21, 0x02, 0x41, 0x90, 0x80, 0x08, 0x20, 0x00, 0x41, 0x08, 0x6a,
    0x20, 0x02, 0x6a, 0x36, 0x02, 0x00, 0x20, 0x01, 0x41, 0xf0, 0xff, 0xff, 0xff, 0x07, 0x46, 0x04,
    0x40, 0x00, 0x0b, 0x20, 0x01, 0x41, 0xf1, 0xff, 0xff, 0xff, 0x07, 0x46, 0x04, 0x40, 0x03, 0x40,
    0x0c, 0x00, 0x0b, 0x0b, 0x41, 0x80, 0x80, 0x04, 0x20, 0x00, 0x41, 0x08, 0x6a, 0x20, 0x02, 0xfc,
    0x0a, 0x00, 0x00, 0x20, 0x01, 0x0b, 0x04, 0x00, 0x10, 0x02, 0x0b, 0x04, 0x00, 0x10, 0x02, 0x0b,
    0x00, 0x3e, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x01, 0x09, 0x01, 0x02, 0x06, 0x61, 0x6e, 0x73, 0x77,
    0x65, 0x72, 0x02, 0x24, 0x04, 0x01, 0x02, 0x00, 0x03, 0x6c, 0x65, 0x6e, 0x01, 0x01, 0x69, 0x02,
    0x03, 0x00, 0x01, 0x70, 0x01, 0x01, 0x72, 0x02, 0x01, 0x6e, 0x03, 0x01, 0x00, 0x03, 0x6c, 0x65,
    0x6e, 0x04, 0x01, 0x00, 0x03, 0x6c, 0x65, 0x6e, 0x03, 0x06, 0x01, 0x02, 0x01, 0x04, 0x01, 0x6c,
];

/// A message answer that makes the scripted guest trap.
pub const TRAP: i32 = 0x7fff_fff0;
/// A message answer that makes the scripted guest loop until its fuel runs out.
pub const SPIN: i32 = 0x7fff_fff1;
const SCRIPT: u32 = 0x20000;
const SCRIPT_END: usize = 0x40000;

/// Reads fuzz bytes in order; zeros past the end.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
    fn text(&mut self, max: usize) -> String {
        let n = (self.u8() as usize) % (max + 1);
        String::from_utf8_lossy(self.take(n)).into_owned()
    }
}

fn uleb(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `template` with a data section holding `script` at [`SCRIPT`] and the manifest `text`.
fn scripted_module(template: &[u8], script: &[u8], text: &str) -> Vec<u8> {
    let mut m = template.to_vec();
    let mut body = vec![1, 0, 0x41];
    // i32.const takes a signed LEB: SCRIPT's bit 17 is below the sign bit of 3 bytes.
    body.extend_from_slice(&[0x80, 0x80, 0x08, 0x0b]);
    uleb(&mut body, script.len());
    body.extend_from_slice(script);
    m.push(11);
    uleb(&mut m, body.len());
    m.extend_from_slice(&body);
    let mut custom = vec![manifest::SECTION.len() as u8];
    custom.extend_from_slice(manifest::SECTION.as_bytes());
    custom.extend_from_slice(text.as_bytes());
    m.push(0);
    uleb(&mut m, custom.len());
    m.extend_from_slice(&custom);
    m
}

/// A plugin of the scripted guest ([`SCRIPTED_WASM`]) with `manifest`, answering `frames` to
/// `ebtop_frame` and `answers` to `ebtop_message`/`ebtop_enrich`, each in turn (over again
/// after the last): for tests that need a guest to say exactly this.
pub fn scripted_plugin(
    frames: &[i64],
    answers: &[abi::Answer],
    manifest: &str,
    limits: super::Limits,
) -> std::sync::Arc<super::Plugin> {
    let mut script = vec![0u8; 32];
    for f in frames {
        script.extend_from_slice(&f.to_le_bytes());
    }
    let msgs_start = SCRIPT as usize + script.len();
    for a in answers {
        let bytes = abi::encode_answer(a);
        script.extend_from_slice(&(bytes.len() as i32).to_le_bytes());
        script.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        script.extend_from_slice(&bytes);
    }
    let msgs_end = SCRIPT as usize + script.len();
    assert!(msgs_end <= SCRIPT_END, "the script fits the guest's memory");
    script[0..4].copy_from_slice(&(frames.len() as u32).to_le_bytes());
    script[8..12].copy_from_slice(&(msgs_start as u32).to_le_bytes());
    script[12..16].copy_from_slice(&(msgs_end as u32).to_le_bytes());
    script[16..20].copy_from_slice(&(msgs_start as u32).to_le_bytes());
    let module = scripted_module(SCRIPTED_WASM, &script, manifest);
    std::sync::Arc::new(
        super::Plugin::from_bytes(&module, "scripted", limits)
            .unwrap_or_else(|e| panic!("the scripted guest loads: {e:#}")),
    )
}

/// The template compiled, once for [`SCRIPTED_WASM`]: compiling it (parsing, validating, and
/// translating each function at its first call) was half of an input's time when the driver
/// compiled a module per input (perf, 2026-11-29: module parsing and lazy translation 2/3 of
/// the driver's time on small inputs).
fn compiled(template: &[u8]) -> (wasmi::Engine, wasmi::Module) {
    static SCRIPTED: std::sync::OnceLock<(wasmi::Engine, wasmi::Module)> =
        std::sync::OnceLock::new();
    let compile = |t: &[u8]| {
        let engine = super::new_engine();
        let module = wasmi::Module::new(&engine, t)
            .unwrap_or_else(|e| panic!("the scripted guest compiles: {e}"));
        (engine, module)
    };
    if template == SCRIPTED_WASM {
        SCRIPTED.get_or_init(|| compile(SCRIPTED_WASM)).clone()
    } else {
        compile(template)
    }
}

/// A frame answer from three fuzz bytes: mostly the ABI's codes, sometimes out of range.
fn frame_code(b: &mut Bytes) -> i64 {
    let tag = b.u8();
    let v = b.u16() as i64;
    match tag % 6 {
        0 => -1,
        1 => abi::FRAME_NEED | (v & 0xff),
        2 => abi::FRAME_LINE | (v & 0x1_ffff),
        3 | 4 => v & 0x3ff,
        _ => (v << 40) ^ (tag as i64) << 56,
    }
}

/// A message answer: mostly well-formed call halves (small pairing keys so that they pair),
/// sometimes mutated, raw, a heartbeat, a refusal, a trap or a runaway.
fn message_answer(b: &mut Bytes, out: &mut Vec<u8>) {
    let tag = b.u8();
    let (ret, bytes) = match tag % 8 {
        0..=3 => {
            let kind = b.u8() % 5;
            let o = b.u8();
            let answer = abi::Answer {
                kind,
                outcome: match o % 5 {
                    0 => Some(crate::protocols::Outcome::Ok),
                    1 => Some(crate::protocols::Outcome::ClientError),
                    2 => Some(crate::protocols::Outcome::ServerError),
                    3 => Some(crate::protocols::Outcome::Unknown),
                    _ => None,
                },
                status: (o & 0x80 != 0).then(|| b.u16() as u32),
                pair_key: (b.u8() % 4) as u64,
                method: b.text(abi::MAX_METHOD),
                resource: b.text(72),
                status_text: (o & 0x40 != 0).then(|| b.text(abi::MAX_STATUS_TEXT)),
                attrs: (0..b.u8() % 4)
                    .map(|_| (b.text(abi::MAX_ATTR_KEY), b.text(40)))
                    .collect(),
            };
            let mut bytes = abi::encode_answer(&answer);
            if tag & 0x80 != 0 && !bytes.is_empty() {
                // One byte changed: a length or a field out of the ABI.
                let i = b.u16() as usize % bytes.len();
                bytes[i] ^= b.u8() | 1;
            }
            let ret = if tag & 0x40 != 0 {
                bytes.len() as i32 + (b.u8() as i8) as i32
            } else {
                bytes.len() as i32
            };
            (ret, bytes)
        }
        4 => (0, Vec::new()),
        5 => (-((b.u8() as i32) + 1), Vec::new()),
        6 => {
            let n = b.u8() as usize;
            let raw = b.take(n).to_vec();
            (i32::from_le_bytes([b.u8(), b.u8(), b.u8(), b.u8()]), raw)
        }
        _ => (if tag & 0x10 != 0 { TRAP } else { SPIN }, Vec::new()),
    };
    out.extend_from_slice(&ret.to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&bytes);
}

/// The host's side of what a guest answers, driven by a real guest whose answers come from
/// `data` (its template: [`SCRIPTED_WAT`] compiled, which the lib cannot do itself): a parse
/// plugin's frames and call halves through [`crate::protocols::plugin::PluginParser`] on
/// segments, gaps and closes cut from `data`, or an enrich plugin's answers applied to HTTP/1
/// calls of generated traffic through [`super::enrich::Enriched`]. Checks what must hold for
/// any guest: no call claims more bytes than its direction carried, an enrich plugin changes
/// only a call's outcome, status text and details (the same calls as without it), the plugin
/// is disabled exactly at its `max_faults`th fault. Returns the calls made.
pub fn drive_host(template: &[u8], data: &[u8]) -> usize {
    let mut b = Bytes(data);
    let mode = b.u8();
    let enrich = mode & 1 == 1;
    let limits = super::Limits {
        // Small: a runaway costs the fuzzer little.
        fuel_per_call: 2_000,
        max_faults: 1 + (mode as u64 >> 1) % 4,
        ..Default::default()
    };
    let mut script = vec![0u8; 32];
    let frames = (b.u8() % 32) as usize;
    for _ in 0..frames {
        script.extend_from_slice(&frame_code(&mut b).to_le_bytes());
    }
    let msgs_start = SCRIPT as usize + script.len();
    for _ in 0..b.u8() % 24 {
        message_answer(&mut b, &mut script);
        if SCRIPT as usize + script.len() > SCRIPT_END - 0x1_0000 {
            break;
        }
    }
    let msgs_end = SCRIPT as usize + script.len();
    script[0..4].copy_from_slice(&(frames as u32).to_le_bytes());
    script[8..12].copy_from_slice(&(msgs_start as u32).to_le_bytes());
    script[12..16].copy_from_slice(&(msgs_end as u32).to_le_bytes());
    script[16..20].copy_from_slice(&(msgs_start as u32).to_le_bytes());
    let redis = enrich && mode & 0x10 != 0;
    let text = if redis {
        "name=fz\nabi=1\nkind=enrich\nenrich=redis\n"
    } else if enrich {
        "name=fz\nabi=1\nkind=enrich\nenrich=http\n"
    } else if mode & 0x10 != 0 {
        "name=fz\nabi=1\nkind=parse\nports=7878\ntransport=udp\n"
    } else {
        "name=fz\nabi=1\nkind=parse\nports=7878\n"
    };
    // The plugin as `Plugin::from_bytes` makes it from the module with the script as a data
    // segment and the manifest as a section (`scripted_plugin`), without compiling per input:
    // the compiled template is shared and the script written into the instance's memory.
    let manifest = manifest::parse(text.as_bytes()).expect("the driver's manifests parse");
    let (engine, module) = compiled(template);
    let plugin = std::sync::Arc::new(super::Plugin {
        manifest,
        path: "scripted".into(),
        limits,
        engine,
        module,
        counters: Default::default(),
    });
    let mut guest = super::Guest::new(plugin.clone());
    let parts = guest
        .parts
        .as_mut()
        .expect("the scripted guest instantiates");
    parts.memory.data_mut(&mut parts.store)[SCRIPT as usize..][..script.len()]
        .copy_from_slice(&script);
    let guest = std::sync::Arc::new(std::sync::Mutex::new(guest));
    let calls = if redis {
        drive_enrich(guest, &mut b, super::EnrichProto::Redis)
    } else if enrich {
        drive_enrich(guest, &mut b, super::EnrichProto::Http)
    } else {
        drive_parse(guest, &mut b, mode & 0x10 != 0)
    };
    let o = plugin.overhead();
    let faults = o.traps + o.out_of_fuel + o.bad_answers;
    assert_eq!(
        o.disabled,
        faults >= limits.max_faults,
        "disabled at the max_faults'th fault: {o:?}"
    );
    assert!(
        faults <= limits.max_faults,
        "no call after disabling: {o:?}"
    );
    calls
}

/// `datagrams`: a `transport=udp` plugin on a datagram socket, each segment a datagram from
/// or to one of two peers.
fn drive_parse(guest: super::SharedGuest, b: &mut Bytes, datagrams: bool) -> usize {
    use crate::event::Direction;
    use crate::protocols::plugin::{ConnInfo, PluginParser};
    use crate::protocols::{ParseDepth, ParseStats, ParserConfig, Segment, StreamParser};
    let conn = ConnInfo {
        conn_id: 7,
        pid: 42,
        comm: *b"fuzz\0\0\0\0\0\0\0\0\0\0\0\0",
        local: "127.0.0.1:40000".parse().expect("address"),
        peer: "127.0.0.1:7878".parse().expect("address"),
    };
    let cfg = ParserConfig {
        depth: ParseDepth::Full,
        transport: if datagrams {
            crate::protocols::Transport::Datagram
        } else {
            crate::protocols::Transport::Stream
        },
        keep_head: 0,
    };
    let peers: [std::net::SocketAddr; 2] = [
        "127.0.0.1:7878".parse().expect("address"),
        "[::1]:5353".parse().expect("address"),
    ];
    let mut p = PluginParser::new(guest, &conn, &cfg);
    let mut out = Vec::new();
    let mut stats = ParseStats::default();
    let mut fed = [0u64; 2];
    let mut now = 0;
    while !b.0.is_empty() {
        let ctl = b.u8();
        let dir = if ctl & 1 == 0 {
            Direction::Egress
        } else {
            Direction::Ingress
        };
        now += 1000;
        match ctl >> 6 {
            // A gap, of a known length or not.
            3 if ctl & 0x20 != 0 => {
                let len = (ctl & 2 != 0).then(|| b.u16() as u64);
                fed[dir.index()] = fed[dir.index()].saturating_add(len.unwrap_or(1 << 20));
                p.on_gap(dir, len, &mut stats);
            }
            _ => {
                let n = ((ctl >> 1) & 0x1f) as usize * if ctl & 0x40 != 0 { 9 } else { 1 };
                let payload = b.take(n);
                // Top bit: the syscall moved more than was captured.
                let extra = if ctl & 0x80 != 0 { b.u16() as u64 } else { 0 };
                let seg = Segment {
                    dir,
                    payload,
                    tail: &[],
                    total_len: payload.len() as u64 + extra,
                    start_ns: now,
                    end_ns: now + 10,
                    peer: datagrams.then_some(peers[usize::from(ctl & 0x20 != 0)]),
                    pos: fed[dir.index()],
                };
                fed[dir.index()] += seg.total_len;
                p.on_segment(&seg, &mut out, &mut stats);
            }
        }
    }
    p.on_close(&mut out, &mut stats);
    for c in &out {
        let (q, r) = (c.request_dir.index(), c.request_dir.opposite().index());
        assert!(
            c.req.bytes <= fed[q] && c.resp.bytes <= fed[r],
            "a call claims more bytes than were carried: {c:?}, fed {fed:?}"
        );
        assert!(c.method.len() <= abi::MAX_METHOD && c.resource.len() <= abi::MAX_RESOURCE);
    }
    out.len()
}

/// One HTTP/1 exchange of `ctl`: a GET, its response (an interim one first when asked) with
/// `body`.
fn http_exchange(ctl: u8, body: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let req = format!("GET /o/{ctl} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    let mut resp = Vec::new();
    if ctl & 0x40 != 0 {
        resp.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    }
    let code = [200, 404, 500, 204][(ctl >> 6) as usize % 4];
    let len = if code == 204 { 0 } else { body.len() };
    resp.extend_from_slice(
        format!("HTTP/1.1 {code} X\r\nContent-Length: {len}\r\nCookie: s=1\r\n\r\n").as_bytes(),
    );
    resp.extend_from_slice(&body[..len]);
    (req, resp)
}

/// RESP bulk string.
fn bulk(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", s.len()).as_bytes());
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
}

/// A RESP command of bulk strings.
fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        bulk(out, a);
    }
}

/// One Redis exchange: commands (some pipelined, in a transaction, switching to RESP3, or
/// inline) and their replies of each RESP type, `body` as a value or an error's text — or,
/// rarely, a reply that is no RESP or a push, the cases pairing must refuse or count.
fn redis_exchange(ctl: u8, body: &[u8], b: &mut Bytes, big_done: &mut bool) -> (Vec<u8>, Vec<u8>) {
    let sel = b.u8();
    let key = [b'k', b'0' + (sel >> 4) % 8];
    // A value past the 16 KiB an enrich plugin is shown (abi::KEEP), from few input bytes:
    // once per input (parsing it twice is most of an input's time).
    let big;
    let value: &[u8] = if sel & 0x80 != 0 && ctl & 0x80 != 0 && !body.is_empty() && !*big_done {
        *big_done = true;
        big = body.repeat(abi::KEEP / body.len() + 1);
        &big
    } else {
        body
    };
    let text: Vec<u8> = body
        .iter()
        .map(|&c| if c.is_ascii_alphanumeric() { c } else { b' ' })
        .collect();
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    match sel % 10 {
        0 => {
            command(&mut req, &[b"GET", &key]);
            if body.is_empty() {
                resp.extend_from_slice(b"$-1\r\n");
            } else {
                bulk(&mut resp, value);
            }
        }
        1 => {
            command(&mut req, &[b"SET", &key, value]);
            if ctl & 0x40 != 0 {
                resp.extend_from_slice(b"-ERR ");
                resp.extend_from_slice(&text);
                resp.extend_from_slice(b"\r\n");
            } else {
                resp.extend_from_slice(b"+OK\r\n");
            }
        }
        2 => {
            command(&mut req, &[b"INCR", &key]);
            if ctl & 0x40 != 0 {
                resp.extend_from_slice(
                    b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
                );
            } else {
                resp.extend_from_slice(format!(":{}\r\n", body.len()).as_bytes());
            }
        }
        3 => {
            command(&mut req, &[b"LRANGE", &key, b"0", b"-1"]);
            let items: Vec<&[u8]> = body.chunks(7).collect();
            resp.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for i in items {
                bulk(&mut resp, i);
            }
        }
        4 => {
            // Pipelined: two calls complete in one segment, neither handed over.
            command(&mut req, &[b"GET", &key]);
            command(&mut req, &[b"PING"]);
            bulk(&mut resp, value);
            resp.extend_from_slice(b"+PONG\r\n");
        }
        5 => {
            command(&mut req, &[b"MULTI"]);
            command(&mut req, &[b"SET", &key, value]);
            command(&mut req, &[b"EXEC"]);
            resp.extend_from_slice(b"+OK\r\n+QUEUED\r\n*1\r\n");
            if ctl & 0x40 != 0 {
                resp.extend_from_slice(b"-ERR ");
                resp.extend_from_slice(&text);
                resp.extend_from_slice(b"\r\n");
            } else {
                resp.extend_from_slice(b"+OK\r\n");
            }
        }
        6 => {
            // RESP3 from here on: a map, a null, a double, a verbatim string.
            command(&mut req, &[b"HELLO", b"3"]);
            resp.extend_from_slice(b"%1\r\n$6\r\nserver\r\n$5\r\nredis\r\n");
            command(&mut req, &[b"GET", &key]);
            if body.is_empty() {
                resp.extend_from_slice(b"_\r\n");
            } else if ctl & 0x40 != 0 {
                resp.extend_from_slice(format!(",{}.5\r\n", body.len()).as_bytes());
            } else {
                resp.extend_from_slice(format!("={}\r\ntxt:", value.len() + 4).as_bytes());
                resp.extend_from_slice(value);
                resp.extend_from_slice(b"\r\n");
            }
        }
        7 => {
            command(&mut req, &[b"SUBSCRIBE", &key]);
            resp.extend_from_slice(b"*3\r\n$9\r\nsubscribe\r\n");
            bulk(&mut resp, &key);
            resp.extend_from_slice(b":1\r\n*3\r\n$7\r\nmessage\r\n");
            bulk(&mut resp, &key);
            bulk(&mut resp, value);
        }
        8 => {
            req.extend_from_slice(b"PING\r\n");
            resp.extend_from_slice(b"+PONG\r\n");
        }
        _ => {
            // Whatever the input says, as a reply: RESP or not.
            command(&mut req, &[b"GET", &key]);
            resp.extend_from_slice(body);
        }
    }
    (req, resp)
}

/// An enrich plugin's answers applied to calls of `proto` (HTTP/1 or Redis) on generated
/// exchanges, diffed with the bare built-in parser on the same segments.
fn drive_enrich(guest: super::SharedGuest, b: &mut Bytes, proto: super::EnrichProto) -> usize {
    use crate::event::Direction;
    use crate::protocols::{
        http1, redis, ParseDepth, ParseStats, ParserConfig, Segment, StreamParser,
    };
    let cfg = ParserConfig {
        depth: ParseDepth::Full,
        transport: crate::protocols::Transport::Stream,
        keep_head: 0,
    };
    let descriptor = match proto {
        super::EnrichProto::Http => &http1::DESCRIPTOR,
        super::EnrichProto::Redis => &redis::DESCRIPTOR,
    };
    let mut bare = (descriptor.new_parser)(&cfg);
    let mut enriched =
        super::enrich::Enriched::new((descriptor.new_parser)(&cfg), proto, vec![guest], 7, 42);
    let (mut out_b, mut out_e) = (Vec::new(), Vec::new());
    let (mut st_b, mut st_e) = (ParseStats::default(), ParseStats::default());
    let mut now = 0;
    let mut pos = [0u64; 2];
    let mut big_done = false;
    // Exchanges, each cut into syscalls, some pipelined, some with gaps or bytes past the
    // snaplen, some with interim responses: the cases an enrichment must be refused in.
    while !b.0.is_empty() {
        let ctl = b.u8();
        let body = b.take((ctl as usize & 0x3f) * 3).to_vec();
        let (req, resp) = match proto {
            super::EnrichProto::Http => http_exchange(ctl, &body),
            super::EnrichProto::Redis => redis_exchange(ctl, &body, b, &mut big_done),
        };
        let cut = b.u8();
        let mut feed = |dir: Direction, bytes: &[u8], extra: u64| {
            now += 1000;
            let seg = Segment {
                dir,
                payload: bytes,
                tail: &[],
                total_len: bytes.len() as u64 + extra,
                start_ns: now,
                end_ns: now + 10,
                peer: None,
                pos: pos[dir.index()],
            };
            pos[dir.index()] += seg.total_len;
            bare.on_segment(&seg, &mut out_b, &mut st_b);
            enriched.on_segment(&seg, &mut out_e, &mut st_e);
        };
        feed(Direction::Egress, &req, 0);
        let at = (cut as usize * 7) % (resp.len() + 1);
        match cut & 3 {
            0 => feed(Direction::Ingress, &resp, 0),
            1 => {
                feed(Direction::Ingress, &resp[..at], 0);
                feed(Direction::Ingress, &resp[at..], 0);
            }
            2 => feed(Direction::Ingress, &resp[..at], (resp.len() - at) as u64),
            _ => {
                feed(Direction::Ingress, &resp[..at], 0);
                let len = Some((resp.len() - at) as u64);
                bare.on_gap(Direction::Ingress, len, &mut st_b);
                enriched.on_gap(Direction::Ingress, len, &mut st_e);
                pos[1] += (resp.len() - at) as u64;
            }
        }
    }
    bare.on_close(&mut out_b, &mut st_b);
    enriched.on_close(&mut out_e, &mut st_e);
    assert_eq!(st_b, st_e, "an enrich plugin changes no parse counter");
    assert_eq!(
        out_b.len(),
        out_e.len(),
        "an enrich plugin makes no call and drops none"
    );
    for (x, y) in out_b.iter().zip(&out_e) {
        assert_eq!(
            (
                &x.method,
                &x.resource,
                x.status,
                &x.req,
                &x.resp,
                x.truncated
            ),
            (
                &y.method,
                &y.resource,
                y.status,
                &y.req,
                &y.resp,
                y.truncated
            ),
            "an enrich plugin changes only outcome, status text and details"
        );
        assert!(y.details.len() <= x.details.len() + abi::MAX_ATTRS);
    }
    out_e.len()
}

/// Seeds of `drive_host`: a parse script that frames, pairs, parts and faults; an enrich
/// script that marks errors.
pub fn host_seeds() -> Vec<(String, Vec<u8>)> {
    // Parse: frames "the header is 4 bytes", then "its body is 4", in turn; answers a request
    // (key 1), a part and a response (key 1, status 7, "E4", an attribute); 8 bytes sent,
    // 16 received, then a gap.
    let mut parse = vec![0u8, 2, 1, 4, 0, 3, 4, 0, 3];
    parse.extend_from_slice(&[0, 1, 0x80, 1, 0, 1, 3, b'G', b'E', b'T', 2, b'/', b'a', 0]);
    parse.extend_from_slice(&[1, 3, 4, 0, 0, 0, 0]);
    parse.extend_from_slice(&[
        2, 2, 0xc0, 7, 0, 1, 0, 0, 2, b'E', b'4', 1, 1, b'k', 1, b'v',
    ]);
    parse.push(16);
    parse.extend_from_slice(b"abcdefgh");
    parse.push(33);
    parse.extend_from_slice(b"abcdefghijklmnop");
    parse.extend_from_slice(&[0xe1]);
    // Enrich: answers "client error, status text E42", then "leave it"; a 200 whose body is
    // a JSON error in one syscall, a 500 in two.
    let mut enrich = vec![1u8, 0, 2];
    enrich.extend_from_slice(&[1, 0, 0x42, 0, 0, 0, 3, b'E', b'4', b'2', 0, 4]);
    enrich.push(5);
    enrich.extend_from_slice(br#"{"code":"E42"}"#);
    enrich.extend_from_slice(&[b' ', 0, 0x81, b'a', b'b', b'c', 1]);
    // Datagrams: the same answers, no frames; a request and a part sent, a response received.
    let mut dgram = vec![0x10u8, 0, 3];
    dgram.extend_from_slice(&parse[9..9 + 14 + 7 + 16]);
    for (ctl, fill) in [(16u8, b'q'), (17, b'p'), (17, b'r')] {
        dgram.push(ctl);
        dgram.extend_from_slice(&[fill; 8]);
    }
    // Redis enrich: the same answers; a GET's bulk reply in one syscall, a SET's error, a
    // pipelined GET and PING (skipped), an LRANGE's array in two syscalls.
    let mut redis = vec![0x11u8];
    redis.extend_from_slice(&enrich[1..3 + 12]);
    for (ctl, fill, sel, cut) in [(5u8, b'v', 0u8, 0u8), (0x41, b'x', 1, 0), (2, b'p', 4, 1)] {
        redis.push(ctl);
        redis.extend(std::iter::repeat_n(fill, (ctl as usize & 0x3f) * 3));
        redis.extend_from_slice(&[sel, cut]);
    }
    redis.extend_from_slice(&[
        3, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h', b'i', 3, 9,
    ]);
    vec![
        ("host_parse".into(), parse),
        ("host_enrich".into(), enrich),
        ("host_datagrams".into(), dgram),
        ("host_enrich_redis".into(), redis),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Vec<u8> {
        wat::parse_str(SCRIPTED_WAT).expect("the scripted guest compiles")
    }

    #[test]
    fn the_committed_scripted_guest_is_its_wat_compiled() {
        assert_eq!(
            SCRIPTED_WASM,
            template(),
            "SCRIPTED_WAT changed: regenerate SCRIPTED_WASM \
             (cargo run --example wat2wasm -- t.wat t.wasm)"
        );
    }

    #[test]
    fn the_host_side_seeds_make_calls_and_random_scripts_never_panic() {
        let t = template();
        let seeds = host_seeds();
        assert!(
            drive_host(&t, &seeds[0].1) >= 1,
            "the parse seed pairs a call"
        );
        assert!(
            drive_host(&t, &seeds[1].1) >= 1,
            "the enrich seed's calls pass"
        );
        assert!(
            drive_host(&t, &seeds[3].1) >= 4,
            "the Redis enrich seed's calls pass"
        );
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..400 {
            let mut data = seeds[i % seeds.len()].1.clone();
            for _ in 0..(i % 64) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = x as usize % (data.len() + 1);
                if x & 0x100 != 0 && at < data.len() {
                    data[at] = (x >> 24) as u8;
                } else {
                    data.insert(at, (x >> 32) as u8);
                }
            }
            drive_host(&t, &data);
        }
    }
}
