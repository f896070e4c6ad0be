//! What a person reading calls must not see: values of secret headers and of query-string
//! parameters named like secrets. Shared by the HTTP parsers; pure, bytes in and out.

use std::borrow::Cow;

/// Header values that are credentials or session state.
pub const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "x-auth-token",
];

/// Whether a header's value is a secret (name compared without case).
pub fn is_secret_header(name: &[u8]) -> bool {
    let name = name.trim_ascii();
    SECRET_HEADERS
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s.as_bytes()))
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

/// A request target with the values of secret query parameters replaced by `[redacted]`
/// (`/cb?code=[redacted]&state=x`); borrowed unchanged when there is none.
pub fn redact_query(target: &[u8]) -> Cow<'_, [u8]> {
    let Some(q) = target.iter().position(|&b| b == b'?') else {
        return Cow::Borrowed(target);
    };
    let end = target[q..]
        .iter()
        .position(|&b| b == b'#')
        .map_or(target.len(), |i| q + i);
    let query = &target[q + 1..end];
    let secret_value = |param: &[u8]| {
        param
            .iter()
            .position(|&b| b == b'=')
            .filter(|&eq| eq + 1 < param.len() && is_secret_param(&param[..eq]))
    };
    if !query
        .split(|&b| b == b'&')
        .any(|p| secret_value(p).is_some())
    {
        return Cow::Borrowed(target);
    }
    let mut out = Vec::with_capacity(target.len());
    out.extend_from_slice(&target[..=q]);
    for (i, param) in query.split(|&b| b == b'&').enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        match secret_value(param) {
            Some(eq) => {
                out.extend_from_slice(&param[..=eq]);
                out.extend_from_slice(REDACTED);
            }
            None => out.extend_from_slice(param),
        }
    }
    out.extend_from_slice(&target[end..]);
    Cow::Owned(out)
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
}
