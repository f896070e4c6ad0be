//! Resource normalisation: turns a call's raw resource (HTTP path, SQL text, Redis command line)
//! into a template so per-endpoint tables stay small: `/users/123` and `/users/456` are one
//! endpoint, `/users/{id}`.
//!
//! The rules are deliberately conservative about what they keep: anything that looks like an
//! identifier (numbers, UUIDs, hex digests, tokens, e-mail addresses) becomes `{id}`; query
//! strings are dropped. The endpoint table's cap is the backstop for what slips through.

use crate::protocols::Protocol;

/// Placeholder for an identifier-like path segment.
pub const ID: &str = "{id}";
/// Longest normalised resource kept, in bytes; longer ones are cut (at a char boundary) so one
/// huge URL cannot make a key arbitrarily large.
pub const MAX_RESOURCE_LEN: usize = 256;

pub use crate::protocols::ResourceKind;

/// The endpoint resource for a call: normalised per `proto`, or the raw resource if `keep_raw`
/// (cut to [`MAX_RESOURCE_LEN`] either way).
pub fn normalize(proto: Protocol, method: &str, resource: &str, keep_raw: bool) -> String {
    if keep_raw {
        return truncated(resource).to_owned();
    }
    normalize_kind(proto.resource_kind(), method, resource)
}

/// `PTR 1.0.0.127.in-addr.arpa` → `PTR {addr}.in-addr.arpa`; other questions unchanged.
fn normalize_dns_question(resource: &str) -> String {
    for zone in [".in-addr.arpa", ".ip6.arpa"] {
        if let Some((ty, name)) = resource.split_once(' ') {
            let bare = name.split(' ').next().unwrap_or(name);
            if let Some(addr) = bare.strip_suffix(zone) {
                if !addr.is_empty() && addr.bytes().all(|c| c.is_ascii_hexdigit() || c == b'.') {
                    return format!("{ty} {{addr}}{zone}{}", &name[bare.len()..]);
                }
            }
        }
    }
    resource.to_owned()
}

/// [`normalize`] for a resource shape; lets parsers not yet in [`Protocol`] be tested.
pub fn normalize_kind(kind: ResourceKind, method: &str, resource: &str) -> String {
    let out = match kind {
        // CONNECT's target is host:port (authority form), not a path.
        ResourceKind::UrlPath if method.eq_ignore_ascii_case("CONNECT") => resource.to_owned(),
        ResourceKind::UrlPath => normalize_url_path(resource),
        ResourceKind::Sql => normalize_sql(resource),
        ResourceKind::Command => normalize_command(method, resource),
        ResourceKind::DnsQuestion => normalize_dns_question(resource),
        ResourceKind::RpcMethod => resource.to_owned(),
    };
    match truncated(&out).len() {
        n if n == out.len() => out,
        n => out[..n].to_owned(),
    }
}

pub(crate) fn truncated(s: &str) -> &str {
    crate::text::cut(s, MAX_RESOURCE_LEN)
}

/// HTTP request target → path template. Absolute-form targets (`http://host/p`, sent to
/// proxies) keep their scheme and authority; `*` (OPTIONS) stays as is.
pub fn normalize_url_path(target: &str) -> String {
    // Byte scans throughout: every delimiter is ASCII, so each cut is a char boundary (and
    // `str` pattern searchers were a tenth of the per-call cost).
    let bytes = target.as_bytes();
    let end = bytes
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(bytes.len());
    let target = &target[..end];
    let bytes = target.as_bytes();
    let (prefix, path) = match bytes.windows(3).position(|w| w == b"://") {
        Some(i) => {
            let after = i + 3;
            let path_start = bytes[after..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(target.len(), |j| after + j);
            target.split_at(path_start)
        }
        None => ("", target),
    };
    let mut out = String::with_capacity(target.len().min(MAX_RESOURCE_LEN));
    out.push_str(prefix);
    let mut rest = Some(path);
    let mut first = true;
    while let Some(r) = rest {
        let (seg, next) = match r.bytes().position(|b| b == b'/') {
            Some(j) => (&r[..j], Some(&r[j + 1..])),
            None => (r, None),
        };
        if !first {
            out.push('/');
        }
        first = false;
        push_segment(&mut out, seg);
        if out.len() > MAX_RESOURCE_LEN {
            break;
        }
        rest = next;
    }
    out
}

/// Appends `seg`, or `{id}` if it identifies something. A short alphabetic extension is kept
/// (`/img/123.png` → `/img/{id}.png`) since it tells what kind of resource it is.
fn push_segment(out: &mut String, seg: &str) {
    if is_id(seg) {
        out.push_str(ID);
        return;
    }
    if let Some(dot) = seg.bytes().rposition(|b| b == b'.') {
        let (stem, ext) = (&seg[..dot], &seg[dot + 1..]);
        let short_alpha_ext =
            (1..=5).contains(&ext.len()) && ext.bytes().all(|b| b.is_ascii_alphabetic());
        if short_alpha_ext && is_id(stem) {
            out.push_str(ID);
            out.push('.');
            out.push_str(ext);
            return;
        }
    }
    out.push_str(seg);
}

/// Does a path segment look like an identifier rather than a name?
pub fn is_id(seg: &str) -> bool {
    let b = seg.as_bytes();
    if b.is_empty() {
        return false;
    }
    // One pass over the bytes for every class the rules below ask about.
    let (mut digits, mut hex, mut alpha, mut token) = (0usize, 0usize, 0usize, 0usize);
    let mut first_at = None;
    let mut last_dot = None;
    for (i, &c) in b.iter().enumerate() {
        digits += usize::from(c.is_ascii_digit());
        hex += usize::from(c.is_ascii_hexdigit());
        alpha += usize::from(c.is_ascii_alphabetic());
        token +=
            usize::from(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'+' | b'=' | b'.'));
        if c == b'@' && first_at.is_none() {
            first_at = Some(i);
        }
        if c == b'.' {
            last_dot = Some(i);
        }
    }
    let has_digit = digits > 0;
    // Numbers: /users/123.
    if digits == b.len() {
        return true;
    }
    // Hex digests, object ids: ≥ 8 hex chars. A digit is required so words made of a-f
    // ("feedface", "deadbeef"-style names, "accede") stay.
    if b.len() >= 8 && has_digit && hex == b.len() {
        return true;
    }
    if is_uuid(b) {
        return true;
    }
    // E-mail addresses, raw or percent-encoded @, with a dot after it.
    let at = first_at.or_else(|| b.windows(3).position(|w| w == b"%40"));
    if let (Some(at), Some(dot)) = (at, last_dot) {
        if at > 0 && dot > at {
            return true;
        }
    }
    // Tokens (base64 / base64url, JWT-ish, long slugs with numbers): ≥ 20 chars from the
    // base64url alphabet (plus padding and '.') with a digit and a letter.
    b.len() >= 20 && has_digit && alpha > 0 && token == b.len()
}

/// 8-4-4-4-12 hex digits.
fn is_uuid(b: &[u8]) -> bool {
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// SQL text → statement template: string and numeric literals → `?`, `IN (1, 2, 3)` and
/// `VALUES (1, 'a'), (2, 'b')` → `IN (?)` / `VALUES (?)`, comments dropped, whitespace collapsed.
/// Identifiers (including `"quoted"` and `` `quoted` ``) and placeholders (`$1`, `?`) stay.
pub fn normalize_sql(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len().min(MAX_RESOURCE_LEN));
    let mut i = 0;
    let mut pending_space = false;
    // Emits a token, turning any whitespace seen before it into one space — except after "("
    // and before "," or ")", so lists compare equal however they were spaced.
    let push = |out: &mut String, pending_space: &mut bool, tok: &str| {
        let tight = out.is_empty() || out.ends_with('(') || matches!(tok, "," | ")");
        if *pending_space && !tight {
            out.push(' ');
        }
        *pending_space = false;
        out.push_str(tok);
    };
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            pending_space = true;
            i += 1;
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            // Line comment.
            i = b[i..]
                .iter()
                .position(|&x| x == b'\n')
                .map_or(b.len(), |p| i + p);
            pending_space = true;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = sql[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            pending_space = true;
        } else if c == b'\'' {
            // String literal; '' and \' are escapes inside it.
            i += 1;
            while i < b.len() {
                match b[i] {
                    b'\\' => i += 2,
                    b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
                    b'\'' => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
            push(&mut out, &mut pending_space, "?");
        } else if c == b'"' || c == b'`' {
            // Quoted identifier: kept verbatim.
            let end = b[i + 1..]
                .iter()
                .position(|&x| x == c)
                .map_or(b.len(), |p| i + 1 + p + 1);
            push(&mut out, &mut pending_space, &sql[i..end]);
            i = end;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // Number (integer, decimal, exponent, hex); only reached at a token start, so the
            // digits of `t1` or `$1` never get here.
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric()
                    || b[i] == b'.'
                    || ((b[i] == b'+' || b[i] == b'-') && matches!(b[i - 1], b'e' | b'E')))
            {
                i += 1;
            }
            push(&mut out, &mut pending_space, "?");
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
            {
                i += 1;
            }
            push(&mut out, &mut pending_space, &sql[start..i]);
        } else {
            // Punctuation: one char (a whole UTF-8 char, to keep slicing valid).
            let len = sql[i..].chars().next().map_or(1, char::len_utf8);
            push(&mut out, &mut pending_space, &sql[i..i + len]);
            i += len;
        }
        if out.len() > MAX_RESOURCE_LEN {
            break;
        }
    }
    collapse_lists(&out)
}

/// `(?,?,?)` → `(?)` and `(?), (?)` → `(?)`, so the number of values does not make new keys.
fn collapse_lists(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find('(') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find(')');
        let is_list = close.is_some_and(|c| {
            let inner = &after[..c];
            !inner.is_empty() && inner.bytes().all(|x| matches!(x, b'?' | b',' | b' '))
        });
        match close {
            Some(c) if is_list => {
                // A list of placeholders; swallow following `, (…)` lists of the same kind.
                let mut tail = &after[c + 1..];
                loop {
                    let t = tail.trim_start_matches([',', ' ']);
                    let Some(inner_end) = t.strip_prefix('(').and_then(|x| x.find(')')) else {
                        break;
                    };
                    let inner = &t[1..1 + inner_end];
                    if !tail.starts_with(',')
                        || inner.is_empty()
                        || !inner.bytes().all(|x| matches!(x, b'?' | b',' | b' '))
                    {
                        break;
                    }
                    tail = &t[inner_end + 2..];
                }
                out.push_str("(?)");
                rest = tail;
            }
            _ => {
                out.push('(');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A command protocol's endpoint resource: the key with its identifier-like parts as `{id}`
/// (`user:{id}`; empty when the command has none). The parser gives the command as `method`
/// (its own column, as HTTP's method is) and the key as `resource`. With no method, `resource`
/// is read as a command line: `GET user:1` → `GET user:{id}`.
pub fn normalize_command(method: &str, resource: &str) -> String {
    let mut out = String::new();
    if method.trim().is_empty() {
        let mut words = resource.split_ascii_whitespace();
        out.extend(words.next().unwrap_or("").chars().take(48));
        out.make_ascii_uppercase();
        if let Some(key) = words.next() {
            out.push(' ');
            push_key_template(&mut out, key);
        }
    } else {
        push_key_template(&mut out, resource);
    }
    out
}

/// Appends `key` with identifier-like parts replaced by `{id}`. Keys are split the way they are
/// usually built: by `:` `/` `{` `}` (`user:1234`, `cache/v2/item/42`, `{user:7}:cart`), then
/// by `.`, then by `-` `_`; each piece that [`is_id`] (numbers, long hex, UUIDs, e-mail
/// addresses, tokens) becomes `{id}`, tested whole before it is split further (a UUID's dashes,
/// an address's dots). Words stay: `user_profile`, `session-store`.
fn push_key_template(out: &mut String, key: &str) {
    const LEVELS: [&[u8]; 3] = [b":/{}", b".", b"-_"];
    fn push(out: &mut String, piece: &str, level: usize) {
        // The whole key is only split (`u:a.b@example.com` would read as an address).
        if level > 0 && is_id(piece) {
            out.push_str(ID);
            return;
        }
        let Some(seps) = LEVELS.get(level) else {
            out.push_str(piece);
            return;
        };
        let mut start = 0;
        for (i, b) in piece.bytes().enumerate() {
            if seps.contains(&b) {
                push(out, &piece[start..i], level + 1);
                out.push(b as char);
                start = i + 1;
            }
        }
        push(out, &piece[start..], level + 1);
    }
    // Long keys are cut first (at a char boundary): the template is cut at the same length.
    push(out, truncated(key), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_paths() {
        let cases: &[(&str, &str)] = &[
            ("/", "/"),
            ("", ""),
            ("/users/123/orders/9", "/users/{id}/orders/{id}"),
            ("/users/123?expand=1&b=2", "/users/{id}"),
            ("/search?q=abc", "/search"),
            ("/page#frag", "/page"),
            ("/v1/items", "/v1/items"),
            ("/api/v2/users/me", "/api/v2/users/me"),
            ("/o/550e8400-e29b-41d4-a716-446655440000", "/o/{id}"),
            ("/o/550E8400-E29B-41D4-A716-446655440000/x", "/o/{id}/x"),
            ("/commit/3f2a9c1d", "/commit/{id}"),
            (
                "/blob/da39a3ee5e6b4b0d3255bfef95601890afd80709",
                "/blob/{id}",
            ),
            // Hex-looking words without digits stay.
            ("/feedface/deadbeef", "/feedface/deadbeef"),
            // Short hex with a digit stays (could be a name like "a1b2").
            ("/x/abc1", "/x/abc1"),
            ("/t/eyJhbGciOiJIUzI1NiJ9_abcDEF", "/t/{id}"),
            ("/reset/dGhpcyBpcyBhIHRva2VuMTIz", "/reset/{id}"),
            // Long name without a digit stays.
            (
                "/docs/getting-started-with-ebtop",
                "/docs/getting-started-with-ebtop",
            ),
            ("/u/john.doe@example.com/profile", "/u/{id}/profile"),
            ("/u/john%40example.com", "/u/{id}"),
            ("/img/42.png", "/img/{id}.png"),
            ("/static/app.js", "/static/app.js"),
            ("//double//7", "//double//{id}"),
            (
                "http://example.com:8080/a/1?x",
                "http://example.com:8080/a/{id}",
            ),
            ("http://example.com", "http://example.com"),
            ("*", "*"),
            ("/a/x17y", "/a/x17y"),
        ];
        for (raw, want) in cases {
            assert_eq!(
                normalize(Protocol::Http, "GET", raw, false),
                *want,
                "input {raw:?}"
            );
        }
    }

    #[test]
    fn http_connect_and_keep_raw() {
        assert_eq!(
            normalize(Protocol::Http, "CONNECT", "example.com:443", false),
            "example.com:443"
        );
        assert_eq!(
            normalize(Protocol::Http, "GET", "/users/1?a=2", true),
            "/users/1?a=2"
        );
    }

    #[test]
    fn long_resources_are_cut_at_char_boundary() {
        let long = format!("/{}", "é".repeat(400));
        let n = normalize(Protocol::Http, "GET", &long, false);
        assert!(n.len() <= MAX_RESOURCE_LEN && n.len() > MAX_RESOURCE_LEN - 4);
        let raw = normalize(Protocol::Http, "GET", &long, true);
        assert!(raw.len() <= MAX_RESOURCE_LEN);
        let many = "/1".repeat(1000);
        assert!(normalize(Protocol::Http, "GET", &many, false).len() <= MAX_RESOURCE_LEN);
    }

    #[test]
    fn sql_statements() {
        let cases: &[(&str, &str)] = &[
            (
                "SELECT * FROM users WHERE id = 42",
                "SELECT * FROM users WHERE id = ?",
            ),
            (
                "select name from t where name = 'O''Brien' and x = 'a\\'b'",
                "select name from t where name = ? and x = ?",
            ),
            (
                "SELECT * FROM t WHERE id IN (1, 2, 3)",
                "SELECT * FROM t WHERE id IN (?)",
            ),
            (
                "SELECT * FROM t WHERE id IN (1,2)",
                "SELECT * FROM t WHERE id IN (?)",
            ),
            (
                "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y')",
                "INSERT INTO t (a, b) VALUES (?)",
            ),
            (
                "UPDATE t1 SET v = 1.5e-3, w = 0x1F WHERE k = $1",
                "UPDATE t1 SET v = ?, w = ? WHERE k = $1",
            ),
            (
                "SELECT  a,\n\tb   FROM t -- trailing 123\nWHERE c = ?",
                "SELECT a, b FROM t WHERE c = ?",
            ),
            (
                "SELECT /* id 7 */ \"Col1\" FROM `tbl2` LIMIT 10 OFFSET 20",
                "SELECT \"Col1\" FROM `tbl2` LIMIT ? OFFSET ?",
            ),
            ("SELECT count(*) FROM t", "SELECT count(*) FROM t"),
            ("SELECT f(1) FROM t", "SELECT f(?) FROM t"),
            ("SELECT .5", "SELECT ?"),
        ];
        for (raw, want) in cases {
            assert_eq!(
                normalize_kind(ResourceKind::Sql, "", raw),
                *want,
                "input {raw:?}"
            );
        }
    }

    #[test]
    fn sql_unterminated_and_non_ascii_do_not_panic() {
        for raw in [
            "SELECT 'abc",
            "SELECT \"x",
            "/* open",
            "SELECT 'é' , ü",
            "'\\",
        ] {
            let n = normalize_sql(raw);
            assert!(
                !n.contains("abc") && n.len() <= raw.len() + 4,
                "{raw:?} → {n:?}"
            );
        }
    }

    #[test]
    fn commands() {
        // (method, resource, endpoint resource): the Redis parser gives the command as the
        // method (its own column) and the key as the resource, which becomes a template; a
        // command line in the resource (no method) keeps its command in front.
        let cases: &[(&str, &str, &str)] = &[
            ("", "GET user:1", "GET user:{id}"),
            ("", "set session:abc value EX 10", "SET session:abc"),
            ("HGETALL", "h:9", "h:{id}"),
            ("", "", ""),
            ("GET", "user:1234", "user:{id}"),
            (
                "HGETALL",
                "session:9f86d081884c7d659a2feaa0c55ad015",
                "session:{id}",
            ),
            ("get", "user_profile", "user_profile"),
            ("GET", "user_1234", "user_{id}"),
            ("SET", "cache/v2/item/42", "cache/v2/item/{id}"),
            ("SET", "user.1234.name", "user.{id}.name"),
            (
                "GET",
                "order:550e8400-e29b-41d4-a716-446655440000:items",
                "order:{id}:items",
            ),
            ("GET", "u:john.doe@example.com", "u:{id}"),
            ("SADD", "{user:7}:cart", "{user:{id}}:cart"),
            ("GET", "stats-2024-05-01", "stats-{id}-{id}-{id}"),
            ("GET", "feature-flags", "feature-flags"),
            ("PING", "", ""),
            ("CLIENT SETNAME", "", ""),
            ("GET", "::", "::"),
            ("GET", "ключ:42", "ключ:{id}"),
        ];
        for (method, raw, want) in cases {
            assert_eq!(
                normalize_kind(ResourceKind::Command, method, raw),
                *want,
                "input {raw:?}"
            );
        }
    }
}

#[cfg(test)]
mod grpc_tests {
    use super::*;

    /// gRPC methods are URL paths of names: kept as they are.
    #[test]
    fn grpc_methods_are_kept() {
        for path in ["/ebtop.test.Echo/Unary", "/grpc.health.v1.Health/Check"] {
            assert_eq!(normalize(Protocol::Grpc, "POST", path, false), path);
        }
        assert_eq!(
            normalize(Protocol::Http2, "GET", "/users/1234", false),
            normalize(Protocol::Http, "GET", "/users/1234", false)
        );
    }
}
