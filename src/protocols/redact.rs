//! What a person reading calls must not see: values of secret headers and of query-string
//! parameters named like secrets (in the request target and in URLs inside header values).
//! Shared by the HTTP parsers; pure, bytes in and out.

use std::borrow::Cow;

/// Header names that are secrets wherever they appear in the name (without case):
/// credentials (`Authorization`, `X-Auth-Token`, `X-Registry-Auth`), session state
/// (`Cookie`, `Set-Cookie`, `X-Session-Id`) and tokens of every kind (`X-CSRF-Token`,
/// `X-Amz-Security-Token`, `PRIVATE-TOKEN`, `Cf-Access-Jwt-Assertion`).
const SECRET_HEADER_PARTS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "passw",
    "passphrase",
    "pwd",
    "apikey",
    "signature",
    "credential",
    "session",
    "cookie",
    "csrf",
    "xsrf",
    "jwt",
];

/// Where `auth` in a name is not a credential: a server's challenge (`WWW-Authenticate`,
/// `Proxy-Authenticate`: the scheme and realm it asks for, what a person debugging a 401
/// wants to read) and an authority (`:authority`, a host name).
const NOT_AUTH: &[&str] = &["authenticate", "authority"];

/// Names ending in `key` that hold no secret: `Sec-WebSocket-Key` is a random nonce the
/// server answers with `Sec-WebSocket-Accept` derived from it in clear (hiding it protects
/// nothing and hides what a failed handshake is checked against); `Idempotency-Key` names a
/// request so a retry is not applied twice.
const PUBLIC_KEYS: &[&str] = &["sec-websocket-key", "idempotency-key"];

/// Where `needle` (lower case) occurs in `hay`, compared without case.
fn find_ci(hay: &[u8], needle: &str, from: usize) -> Option<usize> {
    let n = needle.as_bytes();
    (from..=hay.len().checked_sub(n.len())?).find(|&i| hay[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Whether a header's value is a secret (name compared without case). By what the name
/// says: it contains one of [`SECRET_HEADER_PARTS`] (`auth` not as part of
/// `authenticate`/`authority`), or it ends in `key` (`X-Api-Key`, `X-Goog-Api-Key`,
/// `Ocp-Apim-Subscription-Key`, `X-Amz-Server-Side-Encryption-Customer-Key`; not `Keep-Alive`,
/// nor `Public-Key-Pins`) other than [`PUBLIC_KEYS`]. CORS headers (`Access-Control-*`) name
/// headers and policies, never carry them (`Access-Control-Allow-Credentials: true`). A
/// harmless header that looks secret (`X-Auth-Request-User`) is hidden too: a name the rule
/// misses leaks, one it catches only costs a value.
pub fn is_secret_header(name: &[u8]) -> bool {
    let name = name.trim_ascii();
    let starts =
        |p: &str| name.len() >= p.len() && name[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    if starts("access-control-")
        || PUBLIC_KEYS
            .iter()
            .any(|k| name.eq_ignore_ascii_case(k.as_bytes()))
    {
        return false;
    }
    let ends_in_key = name.len() >= 3 && name[name.len() - 3..].eq_ignore_ascii_case(b"key");
    ends_in_key
        || SECRET_HEADER_PARTS.iter().any(|&part| {
            let mut from = 0;
            while let Some(at) = find_ci(name, part, from) {
                let rest = &name[at..];
                let benign = part == "auth"
                    && NOT_AUTH.iter().any(|n| {
                        rest.len() >= n.len() && rest[..n.len()].eq_ignore_ascii_case(n.as_bytes())
                    });
                if !benign {
                    return true;
                }
                from = at + 1;
            }
            false
        })
}

/// Parameter names that are secrets wherever they appear in a name (`access_token`,
/// `client_secret`, `X-Amz-Signature`, `db_password`).
const SECRET_NAME_PARTS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "signature",
    "credential",
    "session",
    "auth",
];

/// Parameter names that are secrets only as the whole name (`sig`, but not `design`).
const SECRET_NAMES: &[&str] = &["sig", "key", "pwd", "pass", "code", "jwt", "sid"];

/// What a redacted value becomes.
pub const REDACTED: &[u8] = b"[redacted]";

fn is_secret_param(name: &[u8]) -> bool {
    let contains = |part: &str| {
        name.len() >= part.len()
            && name
                .windows(part.len())
                .any(|w| w.eq_ignore_ascii_case(part.as_bytes()))
    };
    SECRET_NAMES
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s.as_bytes()))
        || SECRET_NAME_PARTS.iter().any(|p| contains(p))
}

/// The values of secret parameters in the URLs `text` holds replaced by `[redacted]`;
/// borrowed unchanged when there is none. A query starts after `?`, a fragment after `#`
/// (where OAuth's implicit flow puts `access_token`); both are `&`-separated `name=value`
/// parameters. `ends(b)`: `b` ends a URL (none ends a request target, one URL whatever bytes
/// it holds; in a header value, bytes a URL cannot hold end one and a later `?` starts
/// another).
fn redact_params(text: &[u8], ends: impl Fn(u8) -> bool) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    // What `out` holds of `text`: everything before this.
    let mut copied = 0;
    let mut in_params = false;
    let mut i = 0;
    while i < text.len() {
        if !in_params {
            in_params = matches!(text[i], b'?' | b'#');
            i += 1;
            continue;
        }
        let len = text[i..]
            .iter()
            .position(|&b| b == b'&' || b == b'#' || ends(b))
            .unwrap_or(text.len() - i);
        let param = &text[i..i + len];
        if let Some(eq) = param
            .iter()
            .position(|&b| b == b'=')
            .filter(|&eq| eq + 1 < param.len() && is_secret_param(&param[..eq]))
        {
            let out = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
            out.extend_from_slice(&text[copied..=i + eq]);
            out.extend_from_slice(REDACTED);
            copied = i + len;
        }
        i += len;
        if let Some(&b) = text.get(i) {
            in_params = b == b'&' || b == b'#';
            i += 1;
        }
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.extend_from_slice(&text[copied..]);
            Cow::Owned(out)
        }
    }
}

/// A request target with the values of secret query (and fragment) parameters replaced by
/// `[redacted]` (`/cb?code=[redacted]&state=x`); borrowed unchanged when there is none.
pub fn redact_query(target: &[u8]) -> Cow<'_, [u8]> {
    redact_params(target, |_| false)
}

/// A header value with the secret query values of the URLs in it redacted as the request
/// target's: `Referer: https://x/cb?token=[redacted]`, `Location`, `Content-Location`,
/// `Refresh: 0; url=/login?password=[redacted]`, `Link: <…?sig=[redacted]>; rel=next`, and
/// the URLs proxies forward in headers of their own (`X-Original-URL`, `X-Forwarded-Uri`),
/// which no list of names would keep up with; so every header's value is read so. A URL ends
/// at a byte it cannot hold unencoded (white space, control bytes, `"`, `<`, `>`). Borrowed
/// unchanged when there is nothing to hide.
pub fn redact_urls_in(value: &[u8]) -> Cow<'_, [u8]> {
    redact_params(value, |b| {
        b.is_ascii_whitespace() || b.is_ascii_control() || matches!(b, b'"' | b'<' | b'>')
    })
}

/// An HTTP/1 request line (`GET /x?token=… HTTP/1.1\r\n`) with its target's secret query
/// values redacted; other lines borrowed unchanged.
pub fn redact_request_line(line: &[u8]) -> Cow<'_, [u8]> {
    let Some(sp) = line.iter().position(|&b| b == b' ') else {
        return Cow::Borrowed(line);
    };
    let rest = &line[sp + 1..];
    let target_len = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .unwrap_or(rest.len());
    match redact_query(&rest[..target_len]) {
        Cow::Borrowed(_) => Cow::Borrowed(line),
        Cow::Owned(t) => {
            let mut out = Vec::with_capacity(line.len());
            out.extend_from_slice(&line[..=sp]);
            out.extend_from_slice(&t);
            out.extend_from_slice(&rest[target_len..]);
            Cow::Owned(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(t: &str) -> String {
        String::from_utf8(redact_query(t.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn secret_query_values_are_redacted_and_the_rest_kept() {
        assert_eq!(r("/plain/path"), "/plain/path");
        assert_eq!(r("/search?q=shoes&page=2"), "/search?q=shoes&page=2");
        assert_eq!(
            r("/cb?code=abc123&state=xyz"),
            "/cb?code=[redacted]&state=xyz"
        );
        assert_eq!(
            r("/api?access_token=s3cr3t&design=1&API_KEY=k#frag"),
            "/api?access_token=[redacted]&design=1&API_KEY=[redacted]#frag"
        );
        assert_eq!(
            r("/o?X-Amz-Signature=ff&X-Amz-Credential=AK%2F1&sig=9"),
            "/o?X-Amz-Signature=[redacted]&X-Amz-Credential=[redacted]&sig=[redacted]"
        );
        // Empty values and names without `=` have nothing to hide.
        assert_eq!(r("/x?token=&password"), "/x?token=&password");
        assert_eq!(r("/x?&&token=a&&"), "/x?&&token=[redacted]&&");
        assert!(matches!(redact_query(b"/a?b=c"), Cow::Borrowed(_)));
    }

    #[test]
    fn request_lines_keep_method_and_version() {
        let line = b"GET /login?user=ann&password=hunter2 HTTP/1.1\r\n";
        assert_eq!(
            &*redact_request_line(line),
            b"GET /login?user=ann&password=[redacted] HTTP/1.1\r\n"
        );
        assert!(matches!(
            redact_request_line(b"HTTP/1.1 200 OK\r\n"),
            Cow::Borrowed(_)
        ));
        assert!(is_secret_header(b" Set-Cookie "));
        assert!(!is_secret_header(b"Content-Type"));
    }

    #[test]
    fn fragments_and_odd_targets() {
        // OAuth's implicit flow answers with the token in the fragment.
        assert_eq!(
            r("/cb#access_token=tok&token_type=bearer&state=s"),
            "/cb#access_token=[redacted]&token_type=[redacted]&state=s"
        );
        assert_eq!(r("/a?x=1#sig=2"), "/a?x=1#sig=[redacted]");
        assert_eq!(r("/a#frag"), "/a#frag");
        // A `?` inside the query is a byte of it; nothing ends a target's query early.
        assert_eq!(r("/a?q=?&key=k"), "/a?q=?&key=[redacted]");
        assert_eq!(r("/a?q=\"x y\"&pwd=p"), "/a?q=\"x y\"&pwd=[redacted]");
        assert_eq!(r("?token=t"), "?token=[redacted]");
        assert_eq!(r("/a?token=t?u"), "/a?token=[redacted]");
    }

    fn h(v: &str) -> String {
        String::from_utf8(redact_urls_in(v.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn urls_inside_header_values_are_redacted() {
        assert_eq!(
            h(" https://x.example/cb?token=abc&state=1\r\n"),
            " https://x.example/cb?token=[redacted]&state=1\r\n"
        );
        assert_eq!(
            h("/login?user=ann&password=hunter2"),
            "/login?user=ann&password=[redacted]"
        );
        assert_eq!(h("5; url=/next?sig=abc"), "5; url=/next?sig=[redacted]");
        assert_eq!(
            h("<https://a/?page=2&api_key=k>; rel=\"next\", <https://a/?page=9&api_key=k>; rel=\"last\""),
            "<https://a/?page=2&api_key=[redacted]>; rel=\"next\", <https://a/?page=9&api_key=[redacted]>; rel=\"last\""
        );
        assert_eq!(
            h("https://c/cb#access_token=t&expires_in=3600"),
            "https://c/cb#access_token=[redacted]&expires_in=3600"
        );
        // A URL ends at a byte it cannot hold; what follows is no parameter of it.
        assert_eq!(h("\"/a?x=1\" token=abc"), "\"/a?x=1\" token=abc");
        for kept in [
            "text/html; charset=utf-8",
            "max-age=60",
            "/plain",
            "/a?q=1&page=2",
            "",
        ] {
            assert!(
                matches!(redact_urls_in(kept.as_bytes()), Cow::Borrowed(_)),
                "{kept}"
            );
        }
    }

    #[test]
    fn secret_headers_by_name_and_by_pattern() {
        for secret in [
            "Authorization",
            "Proxy-Authorization",
            "Cookie",
            "set-cookie",
            "X-Api-Key",
            "x-auth-token",
            "X-CSRF-Token",
            "X-CSRFToken",
            "X-XSRF-TOKEN",
            "X-Amz-Security-Token",
            "X-Goog-Api-Key",
            "apikey",
            "Ocp-Apim-Subscription-Key",
            "X-Amz-Server-Side-Encryption-Customer-Key",
            "PRIVATE-TOKEN",
            "X-Vault-Token",
            "X-Registry-Auth",
            "X-Client-Secret",
            "X-Db-Password",
            "X-Hub-Signature-256",
            "X-Session-Id",
            "Cf-Access-Jwt-Assertion",
            "Authentication-Info",
            "X-Amz-Credential",
        ] {
            assert!(is_secret_header(secret.as_bytes()), "{secret}");
        }
        for public in [
            "Keep-Alive",
            "Host",
            "Content-Type",
            "Referer",
            "Location",
            "Public-Key-Pins",
            "X-Key-Id",
            "WWW-Authenticate",
            "Proxy-Authenticate",
            ":authority",
            "Access-Control-Allow-Credentials",
            "Access-Control-Allow-Headers",
            "Sec-WebSocket-Key",
            "Sec-WebSocket-Accept",
            "Idempotency-Key",
            "X-Request-Id",
            "Traceparent",
            "User-Agent",
            "",
        ] {
            assert!(!is_secret_header(public.as_bytes()), "{public}");
        }
    }
}
