//! The `plugin` fuzz target's driver: any bytes as a plugin file's manifest (the module's
//! section walk and the `key=value` text) and as a guest's answers (the call-half layout and
//! `ebtop_frame`'s codes) — the readers of what a plugin hands ebtop. Nothing may panic, and
//! every read is linear in the input.

use super::{abi, manifest};

pub fn drive(data: &[u8]) {
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
    vec![
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
    ]
}
