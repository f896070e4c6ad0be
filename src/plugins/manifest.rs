//! A plugin's manifest: the custom section `ebtop.plugin` of its module, read before the
//! module is compiled (docs/plugins.md). The file is untrusted input: the reader walks the
//! module's section headers only (linear, no allocation but the manifest's fields), and the
//! manifest is a few `key=value` lines under [`MAX_MANIFEST`] bytes.

use thiserror::Error;

/// The name of the custom section that holds the manifest.
pub const SECTION: &str = "ebtop.plugin";
/// The ABI versions this ebtop runs.
pub const ABI_VERSIONS: &[u32] = &[1];
/// The longest manifest read.
pub const MAX_MANIFEST: usize = 4096;
/// Ports one parse plugin may claim.
pub const MAX_PORTS: usize = 16;
/// The longest plugin name (`[a-z0-9_-]`).
pub const MAX_NAME: usize = 32;

/// What a plugin does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginKind {
    /// Frames and parses a protocol of its own on connections to or from these ports.
    /// `datagrams`: `transport=udp`, each datagram one message (no framing).
    Parse { ports: Vec<u16>, datagrams: bool },
    /// Reads the responses of a built-in protocol's calls and adds to them (HTTP/1 only in
    /// ABI 1).
    Enrich { proto: EnrichProto },
}

/// The built-in protocols whose calls a plugin may enrich.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrichProto {
    Http,
    /// Redis (RESP): the guest sees a reply's bytes (no head).
    Redis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub name: String,
    pub abi: u32,
    pub kind: PluginKind,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ManifestError {
    #[error("not a WebAssembly module (no \\0asm version 1 header)")]
    NotWasm,
    #[error("the module is cut short inside a section")]
    Truncated,
    #[error("no `{SECTION}` custom section: not an ebtop plugin")]
    Missing,
    #[error("two `{SECTION}` custom sections")]
    Twice,
    #[error("the manifest is longer than {MAX_MANIFEST} bytes")]
    TooLong,
    #[error("the manifest is not UTF-8 text")]
    NotText,
    #[error("manifest line `{0}`: not key=value")]
    BadLine(String),
    #[error("manifest key `{0}` is unknown to this ebtop")]
    UnknownKey(String),
    #[error("manifest key `{0}` given twice")]
    Repeated(String),
    #[error("manifest: no `{0}=`")]
    MissingKey(&'static str),
    #[error("manifest name `{0}`: 1-{MAX_NAME} characters of a-z, 0-9, _ and -")]
    BadName(String),
    #[error("manifest abi={0}: this ebtop runs ABI versions {ABI_VERSIONS:?}")]
    Abi(String),
    #[error("manifest kind `{0}`: `parse` or `enrich`")]
    BadKind(String),
    #[error("manifest ports `{0}`: 1-{MAX_PORTS} port numbers 1-65535, comma-separated")]
    BadPorts(String),
    #[error("manifest enrich `{0}`: `http` or `redis`")]
    BadEnrich(String),
    #[error("manifest transport `{0}`: `tcp` (the default) or `udp`")]
    BadTransport(String),
    #[error("manifest: `{0}` does not go with kind={1}")]
    Misplaced(&'static str, &'static str),
}

/// A LEB128 u32 at `*at` in `b`.
fn leb_u32(b: &[u8], at: &mut usize) -> Result<u32, ManifestError> {
    let mut v: u32 = 0;
    for i in 0..5 {
        let byte = *b.get(*at).ok_or(ManifestError::Truncated)?;
        *at += 1;
        v |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(ManifestError::Truncated)
}

/// `module` with a custom section `ebtop.plugin` holding `manifest` appended: the post-link
/// step for toolchains that cannot emit one (Go; docs/plugins.md). Custom sections may come
/// anywhere after the header, so appending leaves the module valid.
pub fn with_section(module: &[u8], manifest: &str) -> Vec<u8> {
    fn leb(mut v: usize, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(SECTION.len(), &mut body);
    body.extend_from_slice(SECTION.as_bytes());
    body.extend_from_slice(manifest.as_bytes());
    let mut out = module.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// The payload of the module's `ebtop.plugin` custom section (exactly one).
pub fn section(module: &[u8]) -> Result<&[u8], ManifestError> {
    if module.get(..8) != Some(b"\0asm\x01\0\0\0") {
        return Err(ManifestError::NotWasm);
    }
    let mut at = 8;
    let mut found = None;
    while at < module.len() {
        let id = module[at];
        at += 1;
        let size = leb_u32(module, &mut at)? as usize;
        let end = at.checked_add(size).ok_or(ManifestError::Truncated)?;
        let body = module.get(at..end).ok_or(ManifestError::Truncated)?;
        if id == 0 {
            let mut n = 0;
            let name_len = leb_u32(body, &mut n)? as usize;
            let name = body
                .get(n..n.saturating_add(name_len))
                .ok_or(ManifestError::Truncated)?;
            if name == SECTION.as_bytes() {
                if found.is_some() {
                    return Err(ManifestError::Twice);
                }
                found = Some(&body[n + name_len..]);
            }
        }
        at = end;
    }
    found.ok_or(ManifestError::Missing)
}

/// The manifest of a module's bytes.
pub fn read(module: &[u8]) -> Result<Manifest, ManifestError> {
    parse(section(module)?)
}

/// A manifest's text: `key=value` lines (`#` starts a comment line; blank lines skipped).
pub fn parse(text: &[u8]) -> Result<Manifest, ManifestError> {
    if text.len() > MAX_MANIFEST {
        return Err(ManifestError::TooLong);
    }
    let text = std::str::from_utf8(text).map_err(|_| ManifestError::NotText)?;
    let (mut name, mut abi, mut kind, mut ports, mut enrich, mut transport) =
        (None, None, None, None, None, None);
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| ManifestError::BadLine(line.chars().take(64).collect()))?;
        let (k, v) = (k.trim(), v.trim());
        let slot = match k {
            "name" => &mut name,
            "abi" => &mut abi,
            "kind" => &mut kind,
            "ports" => &mut ports,
            "enrich" => &mut enrich,
            "transport" => &mut transport,
            _ => return Err(ManifestError::UnknownKey(k.chars().take(64).collect())),
        };
        if slot.replace(v).is_some() {
            return Err(ManifestError::Repeated(k.to_owned()));
        }
    }
    let name = name.ok_or(ManifestError::MissingKey("name"))?;
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
    {
        return Err(ManifestError::BadName(name.chars().take(64).collect()));
    }
    let abi_text = abi.ok_or(ManifestError::MissingKey("abi"))?;
    let abi = abi_text
        .parse::<u32>()
        .ok()
        .filter(|a| ABI_VERSIONS.contains(a))
        .ok_or_else(|| ManifestError::Abi(abi_text.chars().take(16).collect()))?;
    let kind = match kind.ok_or(ManifestError::MissingKey("kind"))? {
        "parse" => {
            if enrich.is_some() {
                return Err(ManifestError::Misplaced("enrich", "parse"));
            }
            let text = ports.ok_or(ManifestError::MissingKey("ports"))?;
            let bad = || ManifestError::BadPorts(text.chars().take(64).collect());
            let mut list = Vec::new();
            for p in text.split(',') {
                let port = p.trim().parse::<u16>().map_err(|_| bad())?;
                if port == 0 || list.len() == MAX_PORTS {
                    return Err(bad());
                }
                if !list.contains(&port) {
                    list.push(port);
                }
            }
            let datagrams = match transport.unwrap_or("tcp") {
                "tcp" => false,
                "udp" => true,
                other => {
                    return Err(ManifestError::BadTransport(
                        other.chars().take(32).collect(),
                    ))
                }
            };
            PluginKind::Parse {
                ports: list,
                datagrams,
            }
        }
        "enrich" => {
            if ports.is_some() {
                return Err(ManifestError::Misplaced("ports", "enrich"));
            }
            if transport.is_some() {
                return Err(ManifestError::Misplaced("transport", "enrich"));
            }
            match enrich.ok_or(ManifestError::MissingKey("enrich"))? {
                "http" => PluginKind::Enrich {
                    proto: EnrichProto::Http,
                },
                "redis" => PluginKind::Enrich {
                    proto: EnrichProto::Redis,
                },
                other => return Err(ManifestError::BadEnrich(other.chars().take(32).collect())),
            }
        }
        other => return Err(ManifestError::BadKind(other.chars().take(32).collect())),
    };
    Ok(Manifest {
        name: name.to_owned(),
        abi,
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of only a custom section `name` holding `payload`, after a type section.
    fn module_with(sections: &[(&str, &[u8])]) -> Vec<u8> {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        // An empty type section first: custom sections sit among others.
        m.extend_from_slice(&[1, 1, 0]);
        for (name, payload) in sections {
            let mut body = vec![name.len() as u8];
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(payload);
            m.push(0);
            // Sizes over 127 bytes take a second LEB128 byte.
            let n = body.len();
            if n < 128 {
                m.push(n as u8);
            } else {
                m.push((n & 0x7f) as u8 | 0x80);
                m.push((n >> 7) as u8);
            }
            m.extend_from_slice(&body);
        }
        m
    }

    #[test]
    fn a_parse_manifest_is_read_from_its_section() {
        let m = module_with(&[
            ("name", b"\0"),
            (
                SECTION,
                b"# length-prefixed RPC\nname=lenrpc\nabi=1\nkind=parse\nports=7070, 7071\n",
            ),
        ]);
        assert_eq!(
            read(&m).unwrap(),
            Manifest {
                name: "lenrpc".into(),
                abi: 1,
                kind: PluginKind::Parse {
                    ports: vec![7070, 7071],
                    datagrams: false,
                },
            }
        );
        let udp = parse(b"name=dns\nabi=1\nkind=parse\nports=53\ntransport=udp\n").unwrap();
        assert_eq!(
            udp.kind,
            PluginKind::Parse {
                ports: vec![53],
                datagrams: true
            }
        );
    }

    #[test]
    fn an_enrich_manifest_names_its_protocol() {
        let m = module_with(&[(SECTION, b"name=json-code\nabi=1\nkind=enrich\nenrich=http")]);
        assert_eq!(
            read(&m).unwrap().kind,
            PluginKind::Enrich {
                proto: EnrichProto::Http
            }
        );
    }

    #[test]
    fn bad_modules_and_manifests_are_refused_with_a_reason() {
        use ManifestError as E;
        assert_eq!(read(b"\x7fELF"), Err(E::NotWasm));
        assert_eq!(read(&module_with(&[])), Err(E::Missing));
        let mut cut = module_with(&[(SECTION, b"name=a\nabi=1\nkind=parse\nports=1")]);
        cut.truncate(cut.len() - 3);
        assert_eq!(read(&cut), Err(E::Truncated));
        let two = module_with(&[(SECTION, b""), (SECTION, b"")]);
        assert_eq!(read(&two), Err(E::Twice));
        let cases: &[(&[u8], E)] = &[
            (b"name=a\nabi=2\nkind=parse\nports=1", E::Abi("2".into())),
            (
                b"name=A\nabi=1\nkind=parse\nports=1",
                E::BadName("A".into()),
            ),
            (b"name=a\nabi=1\nkind=parse", E::MissingKey("ports")),
            (
                b"name=a\nabi=1\nkind=parse\nports=0",
                E::BadPorts("0".into()),
            ),
            (
                b"name=a\nabi=1\nkind=parse\nports=1\nports=2",
                E::Repeated("ports".into()),
            ),
            (
                b"name=a\nabi=1\nkind=enrich\nenrich=kafka",
                E::BadEnrich("kafka".into()),
            ),
            (
                b"name=a\nabi=1\nkind=enrich\nenrich=http\nports=1",
                E::Misplaced("ports", "enrich"),
            ),
            (
                b"name=a\nabi=1\nkind=parse\nports=1\ntransport=sctp",
                E::BadTransport("sctp".into()),
            ),
            (
                b"name=a\nabi=1\nkind=enrich\nenrich=http\ntransport=udp",
                E::Misplaced("transport", "enrich"),
            ),
            (b"name=a\nabi=1\nkind=x", E::BadKind("x".into())),
            (b"name=a\nwasi=1", E::UnknownKey("wasi".into())),
            (b"name a", E::BadLine("name a".into())),
            (b"\xff", E::NotText),
        ];
        for (text, want) in cases {
            assert_eq!(&parse(text).unwrap_err(), want, "{:?}", text);
        }
        assert_eq!(parse(&[b'#'; MAX_MANIFEST + 1]), Err(E::TooLong));
        let ports: Vec<String> = (1..=MAX_PORTS + 1).map(|p| p.to_string()).collect();
        let text = format!("name=a\nabi=1\nkind=parse\nports={}", ports.join(","));
        assert!(matches!(parse(text.as_bytes()), Err(E::BadPorts(_))));
    }

    #[test]
    fn a_section_length_past_the_file_end_is_a_truncation_not_a_panic() {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        m.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1]);
        assert_eq!(section(&m), Err(ManifestError::Truncated));
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        // A custom section whose name length runs past the section.
        m.extend_from_slice(&[0, 2, 9, b'a']);
        assert_eq!(section(&m), Err(ManifestError::Truncated));
    }
}
