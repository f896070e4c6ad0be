//! What a person reading ebtop's output must not see: values of headers, query-string and
//! path parameters named like secrets, the credentials of URLs (`scheme://user:password@host`),
//! and secret-named arguments of command lines. One notion of a secret-looking name
//! ([`is_secret_name`]) serves them all. Pure, bytes in and out; applied to what is shown,
//! never to what is recorded.

use std::borrow::Cow;
use std::ops::Range;

/// Parts that make a name secret wherever they occur in it (without case): credentials
/// (`Authorization`, `X-Auth-Token`, `db_password`, `PGPASSWORD`), session state (`Cookie`,
/// `jsessionid`, `X-Session-Id`) and tokens and keys of every kind (`access_token`,
/// `X-CSRF-Token`, `client_secret`, `X-Amz-Signature`, `--api-key`).
const SECRET_NAME_PARTS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "passw",
    "passphrase",
    "pwd",
    "apikey",
    "api_key",
    "api-key",
    "signature",
    "credential",
    "session",
    "cookie",
    "csrf",
    "xsrf",
    "jwt",
];

/// Names that are secrets only as the whole name (`sig`, but not `design`).
const SECRET_NAMES: &[&str] = &["sig", "pass", "code", "sid"];

/// Where `auth` in a name is not a credential: a server's challenge (`WWW-Authenticate`,
/// `Proxy-Authenticate`: the scheme and realm it asks for, what a person debugging a 401
/// wants to read) and an authority (`:authority`, a host name).
const NOT_AUTH: &[&str] = &["authenticate", "authority"];

/// Names ending in `key` that hold no secret: `Sec-WebSocket-Key` is a random nonce the
/// server answers with `Sec-WebSocket-Accept` derived from it in clear (hiding it protects
/// nothing and hides what a failed handshake is checked against); `Idempotency-Key` names a
/// request so a retry is not applied twice.
const PUBLIC_KEYS: &[&str] = &["sec-websocket-key", "idempotency-key"];

/// What a redacted value becomes.
pub const REDACTED_TEXT: &str = "[redacted]";
pub const REDACTED: &[u8] = REDACTED_TEXT.as_bytes();

/// Where `needle` (lower case) occurs in `hay`, compared without case.
fn starts_ci(hay: &[u8], prefix: &str) -> bool {
    hay.len() >= prefix.len() && hay[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// Whether a name (of a header, a query or path parameter, a command-line option or an
/// environment variable; without case) says its value is a secret: it contains one of
/// [`SECRET_NAME_PARTS`] (`auth` not as part of `authenticate`/`authority`), is one of
/// [`SECRET_NAMES`], or ends in `key` (`X-Api-Key`, `Ocp-Apim-Subscription-Key`, `ssh_key`;
/// not `Keep-Alive`, nor `Public-Key-Pins`) other than [`PUBLIC_KEYS`]. A harmless name that
/// looks secret (`X-Auth-Request-User`, `author`, `sort_key`) is hidden too: a name the rule
/// misses leaks, one it catches only costs a value.
pub fn is_secret_name(name: &[u8]) -> bool {
    let ends_in_key = name.len() >= 3 && name[name.len() - 3..].eq_ignore_ascii_case(b"key");
    let public_key = PUBLIC_KEYS
        .iter()
        .any(|k| name.eq_ignore_ascii_case(k.as_bytes()));
    (ends_in_key && !public_key)
        || SECRET_NAMES
            .iter()
            .any(|s| name.eq_ignore_ascii_case(s.as_bytes()))
        || secret_parts().find_overlapping_iter(name).any(|m| {
            let part = SECRET_NAME_PARTS[m.pattern().as_usize()];
            !(part == "auth" && NOT_AUTH.iter().any(|n| starts_ci(&name[m.start()..], n)))
        })
}

/// [`SECRET_NAME_PARTS`] as one automaton: every name of every captured header (and query
/// parameter) is looked at once, in one pass, instead of once per part (a substring search
/// for each of 16 parts was 15% of the terminal UI's CPU at saturation).
fn secret_parts() -> &'static aho_corasick::AhoCorasick {
    static PARTS: std::sync::OnceLock<aho_corasick::AhoCorasick> = std::sync::OnceLock::new();
    PARTS.get_or_init(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(SECRET_NAME_PARTS)
            .expect("the secret name parts make an automaton")
    })
}

/// Whether a header's value is a secret: its name is secret-like ([`is_secret_name`]), but
/// CORS headers (`Access-Control-*`) name headers and policies, never carry them
/// (`Access-Control-Allow-Credentials: true`).
pub fn is_secret_header(name: &[u8]) -> bool {
    let name = name.trim_ascii();
    !starts_ci(name, "access-control-") && is_secret_name(name)
}

/// `text` with each of `ranges` (in order, not overlapping) replaced by [`REDACTED`];
/// borrowed unchanged when there is none.
fn replace_ranges<'a>(text: &'a [u8], ranges: &[Range<usize>]) -> Cow<'a, [u8]> {
    if ranges.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len() + ranges.len() * REDACTED.len());
    let mut copied = 0;
    for r in ranges {
        out.extend_from_slice(&text[copied..r.start]);
        out.extend_from_slice(REDACTED);
        copied = r.end;
    }
    out.extend_from_slice(&text[copied..]);
    Cow::Owned(out)
}

/// The value of a `name=value` parameter at `text[at..at + len]` if its name is secret and
/// its value not empty.
fn secret_value(text: &[u8], at: usize, len: usize) -> Option<Range<usize>> {
    let param = &text[at..at + len];
    let eq = param.iter().position(|&b| b == b'=')?;
    (eq + 1 < param.len() && is_secret_name(&percent_decoded(&param[..eq])))
        .then(|| at + eq + 1..at + len)
}

/// A parameter's name as the server reads it: `%XX` escapes decoded (`pass%77ord` is
/// `password`; a name may be encoded twice: `pass%2577ord`), `+` as a space.
fn percent_decoded(name: &[u8]) -> Cow<'_, [u8]> {
    if !name.iter().any(|&b| b == b'%' || b == b'+') {
        return Cow::Borrowed(name);
    }
    let once = |name: &[u8]| -> Vec<u8> {
        let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        let mut out = Vec::with_capacity(name.len());
        let mut i = 0;
        while i < name.len() {
            match (
                name[i],
                name.get(i + 1).copied().and_then(hex),
                name.get(i + 2).copied().and_then(hex),
            ) {
                (b'%', Some(h), Some(l)) => {
                    out.push((h << 4) | l);
                    i += 3;
                }
                (b'+', ..) => {
                    out.push(b' ');
                    i += 1;
                }
                (b, ..) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        out
    };
    let first = once(name);
    if first.contains(&b'%') {
        return Cow::Owned(once(&first));
    }
    Cow::Owned(first)
}

/// The credentials of the URLs `text` holds (`scheme://userinfo@host`): a password
/// (`user:[redacted]@`), or a userinfo without one whole (`https://[redacted]@github.com`: a
/// lone userinfo is most often a token). The authority ends at `/`, `?`, `#` or `ends`.
fn userinfo_ranges(text: &[u8], ends: &impl Fn(u8) -> bool, out: &mut Vec<Range<usize>>) {
    let mut from = 0;
    while let Some(p) = text[from..]
        .windows(3)
        .position(|w| w == b"://")
        .map(|p| p + from)
    {
        let host_at = p + 3;
        let schemed = p > 0 && text[p - 1].is_ascii_alphanumeric();
        let authority_len = text[host_at..]
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#') || ends(b))
            .unwrap_or(text.len() - host_at);
        let authority = &text[host_at..host_at + authority_len];
        if let Some(at) = authority
            .iter()
            .rposition(|&b| b == b'@')
            .filter(|_| schemed)
        {
            let secret = match authority[..at].iter().position(|&b| b == b':') {
                Some(colon) => host_at + colon + 1..host_at + at,
                None => host_at..host_at + at,
            };
            if !secret.is_empty() {
                out.push(secret);
            }
        }
        from = host_at + authority_len;
    }
}

/// The secret parts of the URLs `text` holds, replaced by `[redacted]`; borrowed unchanged
/// when there is none:
/// - the values of secret-named parameters: of the query (after `?`), of the fragment (after
///   `#`, where OAuth's implicit flow puts `access_token`), both `&`-separated `name=value`,
///   and of a path segment (`;jsessionid=…`, `;sid=…`: matrix parameters, up to the next `/`,
///   `;`, `?` or `#`);
/// - a URL's credentials (`postgres://app:[redacted]@db/shop`).
///
/// `ends(b)`: `b` ends a URL (none ends a request target, one URL whatever bytes it holds; in
/// a header value or an argument, bytes a URL cannot hold end one and a later `?` starts
/// another).
fn redact_url_secrets(text: &[u8], ends: impl Fn(u8) -> bool) -> Cow<'_, [u8]> {
    // A secret is a parameter's value (after `?`, `#` or `;`) or userinfo (before `@`): most
    // targets have neither, and one scan for those bytes settles it.
    if !text.iter().any(|&b| matches!(b, b'?' | b'#' | b';' | b'@')) {
        return Cow::Borrowed(text);
    }
    let mut ranges = Vec::new();
    let mut in_params = false;
    let mut i = 0;
    while i < text.len() {
        if !in_params {
            match text[i] {
                b'?' | b'#' => in_params = true,
                b';' => {
                    let at = i + 1;
                    let len = text[at..]
                        .iter()
                        .position(|&b| matches!(b, b'/' | b';' | b'?' | b'#') || ends(b))
                        .unwrap_or(text.len() - at);
                    ranges.extend(secret_value(text, at, len));
                    i = at + len;
                    continue;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        let len = text[i..]
            .iter()
            .position(|&b| b == b'&' || b == b'#' || ends(b))
            .unwrap_or(text.len() - i);
        ranges.extend(secret_value(text, i, len));
        i += len;
        if let Some(&b) = text.get(i) {
            in_params = b == b'&' || b == b'#';
            i += 1;
        }
    }
    // Credentials inside a redacted value are gone with it.
    let mut creds = Vec::new();
    userinfo_ranges(text, &ends, &mut creds);
    if !creds.is_empty() {
        ranges.extend(creds);
        ranges.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
        let mut end = 0;
        ranges.retain(|r| {
            let keep = r.start >= end;
            end = end.max(r.end);
            keep
        });
    }
    replace_ranges(text, &ranges)
}

/// A request target with its secrets replaced by `[redacted]`: secret query, fragment and
/// path parameter values (`/cb?code=[redacted]&state=x`, `/app;jsessionid=[redacted]`) and an
/// absolute target's credentials (`http://user:[redacted]@host/`); borrowed unchanged when
/// there is none.
pub fn redact_target(target: &[u8]) -> Cow<'_, [u8]> {
    redact_url_secrets(target, |_| false)
}

/// A byte no URL holds unencoded (white space, control bytes, `"`, `<`, `>`): it ends one
/// inside a header value or an argument.
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace() || b.is_ascii_control() || matches!(b, b'"' | b'<' | b'>')
}

/// A header value with the secrets of the URLs in it redacted as the request target's:
/// `Referer: https://x/cb?token=[redacted]`, `Location: https://u:[redacted]@x/`,
/// `Content-Location`, `Refresh: 0; url=/login?password=[redacted]`,
/// `Link: <…?sig=[redacted]>; rel=next`, and the URLs proxies forward in headers of their own
/// (`X-Original-URL`, `X-Forwarded-Uri`), which no list of names would keep up with; so every
/// header's value is read so. Borrowed unchanged when there is nothing to hide.
pub fn redact_urls_in(value: &[u8]) -> Cow<'_, [u8]> {
    redact_url_secrets(value, ends_url)
}

/// An HTTP/1 request line (`GET /x?token=… HTTP/1.1\r\n`) with its target's secrets
/// redacted; other lines borrowed unchanged.
pub fn redact_request_line(line: &[u8]) -> Cow<'_, [u8]> {
    let Some(sp) = line.iter().position(|&b| b == b' ') else {
        return Cow::Borrowed(line);
    };
    let rest = &line[sp + 1..];
    let target_len = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .unwrap_or(rest.len());
    match redact_target(&rest[..target_len]) {
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

/// Name endings of options and variables that say where a secret is or how it is read, not
/// the secret: `--password-file`, `PGPASSFILE`, `--token-path`, `--password-stdin` (a
/// switch: the word after it is no password).
const POINTS_TO_SECRET: &[&str] = &["file", "path", "dir", "stdin", "prompt"];

/// Whether a command-line option's or variable's name (dashes stripped) means its value is
/// a secret.
fn is_secret_arg_name(name: &[u8]) -> bool {
    let points_elsewhere = POINTS_TO_SECRET.iter().any(|s| {
        name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
    });
    is_secret_name(name) && !points_elsewhere
}

/// A name an option or variable may have (`PGPASSWORD`, `api-key`, `javax.net.ssl.keyStorePassword`).
fn is_name_like(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A process's arguments as shown, secrets replaced by `[redacted]` (its recording keeps
/// them as they were):
/// - the value of a long option named like a secret, joined (`--password=[redacted]`) or
///   the next word (`--token [redacted]`); short options (`-p…`) are too ambiguous to guess;
/// - the value of `NAME=value` with a secret-like name (`PGPASSWORD=[redacted]`,
///   `-Djavax.net.ssl.keyStorePassword=[redacted]`);
/// - the value of an argument that is a secret header (`curl -H 'Authorization: [redacted]'`);
/// - the secrets of URLs (`postgres://app:[redacted]@db/shop`, `https://x/?token=[redacted]`).
///
/// Arguments are read word by word (split at spaces), so a shell command (`sh -c '… --token
/// t'`) or a program's rewritten title is read too.
pub fn redact_args(args: &[String]) -> Vec<String> {
    let mut state = ArgState::default();
    args.iter()
        .map(|arg| {
            if let Some(header) = redact_header_arg(arg) {
                state.next = NextWord::Plain;
                return header;
            }
            let words: Vec<Cow<'_, str>> = arg
                .split(' ')
                .map(|word| redact_word(word, &mut state))
                .collect();
            words.join(" ")
        })
        .collect()
}

/// Programs whose short options carry secrets (`-a PW`, `-u user:PW`, `-pPW`): only
/// for them are short options read, the one program at a time that the words name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    /// `redis-cli -a PASSWORD` (and its forks'); `--pass` is a secret long option anyway.
    RedisCli,
    /// `curl -u user:PASSWORD`, `-U`/`--proxy-user` the same: the password after the `:`.
    Curl,
    /// `mysql -pPASSWORD` (joined: `-p NAME` is a database): the MySQL and MariaDB clients.
    Mysql,
    /// `sshpass -p PASSWORD`.
    Sshpass,
}

impl Program {
    /// The program a word runs, by its file name (`/usr/bin/redis-cli`).
    fn of(word: &str) -> Option<Program> {
        let name = word.rsplit('/').next().unwrap_or(word);
        match name {
            "redis-cli" | "valkey-cli" | "keydb-cli" => Some(Program::RedisCli),
            "curl" => Some(Program::Curl),
            "sshpass" => Some(Program::Sshpass),
            n if n.starts_with("mysql") || n.starts_with("mariadb") => Some(Program::Mysql),
            _ => None,
        }
    }
}

/// What the next word of a command line is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum NextWord {
    #[default]
    Plain,
    /// The value of a secret option: hidden whole.
    Secret,
    /// curl's `user:password`: hidden after the first `:`.
    UserPassword,
}

/// Where reading a command line is: the program its words run (the last word naming one
/// of [`Program`]), and what the next word is.
#[derive(Debug, Clone, Copy, Default)]
struct ArgState {
    program: Option<Program>,
    next: NextWord,
}

/// `user:password` with the password hidden; None without a `:` (curl then asks for it).
fn redact_user_password(value: &str) -> Option<String> {
    let (user, password) = value.split_once(':')?;
    (!password.is_empty()).then(|| format!("{user}:{REDACTED_TEXT}"))
}

/// A short option of `program` that carries a secret: the word redacted (joined value), or
/// what the next word is (separate value); None if the word is no such option.
fn redact_short_option(program: Program, word: &str) -> Option<(Cow<'static, str>, NextWord)> {
    let rest = word.strip_prefix('-').filter(|r| !r.starts_with('-'))?;
    let first = rest.chars().next()?;
    let (flag, joined) = rest.split_at(first.len_utf8());
    let owned = |s: String| Some((Cow::Owned(s), NextWord::Plain));
    match (program, flag) {
        (Program::RedisCli, "a") | (Program::Sshpass, "p") if joined.is_empty() => {
            Some((Cow::Owned(word.to_owned()), NextWord::Secret))
        }
        (Program::Sshpass, "p") | (Program::Mysql, "p") if !joined.is_empty() => {
            owned(format!("-{flag}{REDACTED_TEXT}"))
        }
        (Program::Curl, "u" | "U") if joined.is_empty() => {
            Some((Cow::Owned(word.to_owned()), NextWord::UserPassword))
        }
        (Program::Curl, "u" | "U") => {
            redact_user_password(joined).and_then(|v| owned(format!("-{flag}{v}")))
        }
        _ => None,
    }
}

/// An argument that is a whole header with a secret name (`Authorization: Bearer …`, as
/// `curl -H` takes it), its value redacted.
fn redact_header_arg(arg: &str) -> Option<String> {
    let (name, value) = arg.split_once(':')?;
    let space = value.len() - value.trim_start().len();
    (is_name_like(name.as_bytes()) && is_secret_header(name.as_bytes()) && !value.trim().is_empty())
        .then(|| format!("{name}:{}{REDACTED_TEXT}", &value[..space]))
}

/// One word of a command line with its secrets redacted; `state`: the program the words
/// run and whether this word is the value of a secret option before it (set for the next).
fn redact_word<'a>(word: &'a str, state: &mut ArgState) -> Cow<'a, str> {
    if word.is_empty() {
        return Cow::Borrowed(word);
    }
    match std::mem::take(&mut state.next) {
        NextWord::Secret if !word.starts_with('-') => return Cow::Borrowed(REDACTED_TEXT),
        NextWord::UserPassword if !word.starts_with('-') => {
            return redact_user_password(word).map_or(Cow::Borrowed(word), Cow::Owned)
        }
        _ => {}
    }
    if matches!(word, "&&" | "||" | "|" | ";") || word.ends_with(';') {
        // A shell command's next program.
        state.program = None;
    } else if !word.starts_with('-') {
        if let Some(p) = Program::of(word) {
            state.program = Some(p);
        }
    }
    if let Some((shown, next)) = state.program.and_then(|p| redact_short_option(p, word)) {
        state.next = next;
        return shown;
    }
    let bare = word.trim_start_matches('-');
    let dashes = word.len() - bare.len();
    let curl_user =
        |name: &str| state.program == Some(Program::Curl) && matches!(name, "user" | "proxy-user");
    match bare.split_once('=') {
        Some((name, value)) if dashes == 2 && curl_user(name) => redact_user_password(value)
            .map_or(Cow::Borrowed(word), |v| Cow::Owned(format!("--{name}={v}"))),
        Some((name, value))
            if !value.is_empty()
                && is_name_like(name.as_bytes())
                && is_secret_arg_name(name.as_bytes()) =>
        {
            Cow::Owned(format!("{}{name}={REDACTED_TEXT}", &word[..dashes]))
        }
        Some(_) => lossy_owned(redact_urls_in(word.as_bytes()), word),
        None => {
            state.next = if dashes == 2 && curl_user(bare) {
                NextWord::UserPassword
            } else if dashes == 2
                && is_name_like(bare.as_bytes())
                && is_secret_arg_name(bare.as_bytes())
            {
                NextWord::Secret
            } else {
                NextWord::Plain
            };
            lossy_owned(redact_urls_in(word.as_bytes()), word)
        }
    }
}

/// SQL text with its passwords replaced by `[redacted]`, PostgreSQL's and MySQL's forms:
/// - the string after `PASSWORD` (`CREATE ROLE r LOGIN PASSWORD '…'`, `ALTER USER u WITH
///   ENCRYPTED PASSWORD '…'`, what psql's `\password` sends; `SET PASSWORD = '…'`,
///   `SET PASSWORD FOR 'u'@'h' = PASSWORD('…')`; a column named `password` compared or set
///   to a string: `WHERE password = '…'`);
/// - every string after `IDENTIFIED` up to the next `,` or `;` (`IDENTIFIED BY '…'`,
///   `IDENTIFIED WITH plugin BY '…'`, `… AS 'hash'`, `… REPLACE '…'`).
///
/// Strings are `'…'` (with `''` and `\'` inside), `"…"`, and PostgreSQL's `$$…$$` and
/// `$tag$…$tag$`. Words inside strings and comments are no keywords. Borrowed unchanged when
/// there is nothing to hide.
pub fn redact_sql(sql: &str) -> Cow<'_, str> {
    let b = sql.as_bytes();
    // One scan settles most statements: no keyword, nothing to hide.
    if !sql_keywords().is_match(b) {
        return Cow::Borrowed(sql);
    }
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    let keyword_at = |i: usize, kw: &str| {
        starts_ci(&b[i..], kw)
            && (i == 0 || !is_word(b[i - 1]))
            && b.get(i + kw.len()).is_none_or(|&c| !is_word(c))
    };
    let skip_space = |mut i: usize| {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if let Some(end) = sql_string_end(b, i) {
            i = end;
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            i = b[i..]
                .iter()
                .position(|&x| x == b'\n')
                .map_or(b.len(), |p| i + p);
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i = sql[i + 2..].find("*/").map_or(b.len(), |p| i + 4 + p);
        } else if keyword_at(i, "password") {
            // PASSWORD [FOR user] [=] [PASSWORD] [(] 'secret'
            let mut j = skip_space(i + "password".len());
            if keyword_at(j, "for") {
                // The account may be a string too ('bob'@'%'): up to the `=`.
                while j < b.len() && b[j] != b'=' && b[j] != b';' {
                    j = sql_string_end(b, j).unwrap_or(j + 1);
                }
            }
            loop {
                j = skip_space(j);
                if j < b.len() && (b[j] == b'=' || b[j] == b'(') {
                    j += 1;
                } else if keyword_at(j, "password") {
                    j += "password".len();
                } else {
                    break;
                }
            }
            match sql_string_end(b, j) {
                Some(end) => {
                    ranges.push(sql_string_inside(b, j, end));
                    i = end;
                }
                None => i += "password".len(),
            }
        } else if keyword_at(i, "identified") {
            let mut j = i + "identified".len();
            while j < b.len() && b[j] != b',' && b[j] != b';' {
                match sql_string_end(b, j) {
                    Some(end) => {
                        ranges.push(sql_string_inside(b, j, end));
                        j = end;
                    }
                    None => j += 1,
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    ranges.retain(|r| !r.is_empty());
    match replace_ranges(b, &ranges) {
        Cow::Borrowed(_) => Cow::Borrowed(sql),
        Cow::Owned(v) => Cow::Owned(String::from_utf8_lossy(&v).into_owned()),
    }
}

/// `password` and `identified`, found in one pass without case.
fn sql_keywords() -> &'static aho_corasick::AhoCorasick {
    static KEYWORDS: std::sync::OnceLock<aho_corasick::AhoCorasick> = std::sync::OnceLock::new();
    KEYWORDS.get_or_init(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(["password", "identified"])
            .expect("two words make an automaton")
    })
}

/// Where the SQL string starting at `i` ends (just past its closing quote, or the text's
/// end if it is cut), if one starts there: `'…'`, `"…"`, `$$…$$`, `$tag$…$tag$`.
fn sql_string_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        q @ (b'\'' | b'"') => {
            let mut j = i + 1;
            while j < b.len() {
                match b[j] {
                    b'\\' if q == b'\'' => j += 2,
                    c if c == q && b.get(j + 1) == Some(&q) => j += 2,
                    c if c == q => return Some(j + 1),
                    _ => j += 1,
                }
            }
            Some(b.len())
        }
        b'$' => {
            // $tag$: a tag of word characters (not a placeholder like $1).
            let tag_len = b[i + 1..]
                .iter()
                .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))?;
            let tag = &b[i..i + 1 + tag_len + 1];
            if b.get(i + 1 + tag_len) != Some(&b'$')
                || b[i + 1..].first().is_some_and(u8::is_ascii_digit)
            {
                return None;
            }
            let body = i + tag.len();
            Some(
                b[body..]
                    .windows(tag.len())
                    .position(|w| w == tag)
                    .map_or(b.len(), |p| body + p + tag.len()),
            )
        }
        _ => None,
    }
}

/// The inside of the string `b[start..end]` (its quotes or dollar tags left out).
fn sql_string_inside(b: &[u8], start: usize, end: usize) -> Range<usize> {
    let open = match b[start] {
        b'$' => b[start + 1..end]
            .iter()
            .position(|&c| c == b'$')
            .map_or(1, |p| p + 2),
        _ => 1,
    };
    let close_len = open.min(end - start - open);
    let closed = end - start >= 2 * open && b[end - close_len..end] == b[start..start + close_len];
    let inner_end = if closed { end - close_len } else { end };
    (start + open).min(inner_end)..inner_end
}

/// `word` itself where nothing was redacted in it, else the redacted text.
fn lossy_owned<'a>(redacted: Cow<'_, [u8]>, word: &'a str) -> Cow<'a, str> {
    match redacted {
        Cow::Borrowed(_) => Cow::Borrowed(word),
        Cow::Owned(b) => Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition the automaton implements, searched part by part.
    fn is_secret_name_by_part(name: &[u8]) -> bool {
        let ends_in_key = name.len() >= 3 && name[name.len() - 3..].eq_ignore_ascii_case(b"key");
        let public_key = PUBLIC_KEYS
            .iter()
            .any(|k| name.eq_ignore_ascii_case(k.as_bytes()));
        let has_part = SECRET_NAME_PARTS.iter().any(|part| {
            let n = part.len();
            (0..(name.len() + 1).saturating_sub(n)).any(|at| {
                name[at..at + n].eq_ignore_ascii_case(part.as_bytes())
                    && !(*part == "auth" && NOT_AUTH.iter().any(|b| starts_ci(&name[at..], b)))
            })
        });
        (ends_in_key && !public_key)
            || SECRET_NAMES
                .iter()
                .any(|s| name.eq_ignore_ascii_case(s.as_bytes()))
            || has_part
    }

    #[test]
    fn the_automaton_says_what_a_search_part_by_part_says() {
        let pieces = [
            "",
            "x-",
            "Auth",
            "AUTHENTICATE",
            "authority",
            "-",
            "_",
            "token",
            "Session",
            "pass",
            "passw",
            "pwd",
            "key",
            "Api",
            "api_key",
            "sig",
            "design",
            "cookie",
            "csrf",
            "jwt",
            "author",
            "www-",
            "proxy-",
            "secret",
            "credential",
            "signature",
            "idempotency-key",
            "sec-websocket-key",
            "content-type",
            "host",
            "a",
        ];
        let mut checked = 0;
        for a in pieces {
            for b in pieces {
                for c in ["", "auth", "-id", "ization", "enticate-token"] {
                    let name = format!("{a}{b}{c}");
                    assert_eq!(
                        is_secret_name(name.as_bytes()),
                        is_secret_name_by_part(name.as_bytes()),
                        "{name}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, pieces.len() * pieces.len() * 5);
    }

    fn r(t: &str) -> String {
        String::from_utf8(redact_target(t.as_bytes()).into_owned()).unwrap()
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
        assert!(matches!(redact_target(b"/a?b=c"), Cow::Borrowed(_)));
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

    #[test]
    fn credentials_in_urls_are_redacted_the_user_kept() {
        // An absolute request target (to a proxy), and URLs in header values.
        assert_eq!(
            r("http://deploy:Tr0ub4dor@registry.internal:5000/v2/_catalog"),
            "http://deploy:[redacted]@registry.internal:5000/v2/_catalog"
        );
        assert_eq!(
            h(" https://ann:s3cret@app.example/cb?state=1\r\n"),
            " https://ann:[redacted]@app.example/cb?state=1\r\n"
        );
        // A user without a password is most often a token: all of it goes.
        assert_eq!(
            h("https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/org/repo.git"),
            "https://[redacted]@github.com/org/repo.git"
        );
        // Both the credentials and a secret query value; an empty password hides nothing.
        assert_eq!(
            h("<ftp://u:p@files/x?sig=1>; rel=alternate, http://a:@b/"),
            "<ftp://u:[redacted]@files/x?sig=[redacted]>; rel=alternate, http://a:@b/"
        );
        // `@` after the authority is the path's or the query's, not a userinfo.
        for kept in [
            "https://app.example/users/@ann",
            "https://app.example/?email=ann@example.com",
            "mailto:ann@example.com",
            "://@",
        ] {
            assert!(
                matches!(redact_urls_in(kept.as_bytes()), Cow::Borrowed(_)),
                "{kept}"
            );
        }
        // A URL inside a query value has its credentials hidden too.
        assert_eq!(
            r("/login?next=https://bob:pw@intra/home"),
            "/login?next=https://bob:[redacted]@intra/home"
        );
    }

    #[test]
    fn secret_path_parameters_are_redacted() {
        assert_eq!(
            r("/shop/cart;jsessionid=8E0A5D3B1C7F2A94?item=7"),
            "/shop/cart;jsessionid=[redacted]?item=7"
        );
        assert_eq!(
            r("/a;sid=abc;lang=en/b;sessionid=xyz/c"),
            "/a;sid=[redacted];lang=en/b;sessionid=[redacted]/c"
        );
        assert_eq!(
            h("https://app/p;JSESSIONID=0F1E#top"),
            "https://app/p;JSESSIONID=[redacted]#top"
        );
        // Parameters of header values after `;` are no path's: `q`, `charset`, `rel` stay.
        for kept in [
            "/a;v=1/b",
            "text/html;q=0.9,application/xml;q=0.8",
            "0; url=/next",
            "attachment;filename=report.pdf",
        ] {
            assert!(
                matches!(redact_urls_in(kept.as_bytes()), Cow::Borrowed(_)),
                "{kept}"
            );
        }
    }

    #[test]
    fn one_notion_of_a_secret_name_for_headers_parameters_and_arguments() {
        for name in [
            "password",
            "PGPASSWORD",
            "db_passwd",
            "jsessionid",
            "X-Session-Id",
            "access_token",
            "client-secret",
            "api_key",
            "sig",
            "Authorization",
        ] {
            assert!(is_secret_name(name.as_bytes()), "{name}");
        }
        for name in [
            "design",
            "state",
            "page",
            "keys",
            "WWW-Authenticate",
            "authority",
        ] {
            assert!(!is_secret_name(name.as_bytes()), "{name}");
        }
        // Names ending in `key`, whatever they name: a header, a parameter, an option.
        for name in ["X-Goog-Api-Key", "key", "ssh_key", "signing-key"] {
            assert!(is_secret_name(name.as_bytes()), "{name}");
        }
        assert!(!is_secret_name(b"Sec-WebSocket-Key"));
        // Only headers have CORS names.
        assert!(is_secret_name(b"Access-Control-Allow-Credentials"));
        assert!(!is_secret_header(b"Access-Control-Allow-Credentials"));
    }

    fn args(a: &[&str]) -> Vec<String> {
        redact_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn command_line_secrets_are_redacted() {
        assert_eq!(
            args(&[
                "/usr/bin/app",
                "--password=hunter2",
                "--token",
                "tok-123",
                "--port",
                "80"
            ]),
            [
                "/usr/bin/app",
                "--password=[redacted]",
                "--token",
                "[redacted]",
                "--port",
                "80"
            ]
        );
        assert_eq!(
            args(&[
                "curl",
                "--api-key",
                "k",
                "--client-secret=s",
                "https://u:pw@h/x?token=t"
            ]),
            [
                "curl",
                "--api-key",
                "[redacted]",
                "--client-secret=[redacted]",
                "https://u:[redacted]@h/x?token=[redacted]"
            ]
        );
        assert_eq!(
            args(&[
                "env",
                "PGPASSWORD=pg-s3cret",
                "DATABASE_URL=postgres://app:pw@db:5432/shop",
                "psql"
            ]),
            [
                "env",
                "PGPASSWORD=[redacted]",
                "DATABASE_URL=postgres://app:[redacted]@db:5432/shop",
                "psql"
            ]
        );
        assert_eq!(
            args(&[
                "java",
                "-Djavax.net.ssl.keyStorePassword=changeit",
                "-jar",
                "app.jar"
            ]),
            [
                "java",
                "-Djavax.net.ssl.keyStorePassword=[redacted]",
                "-jar",
                "app.jar"
            ]
        );
        // A header as `curl -H` takes it.
        assert_eq!(
            args(&[
                "curl",
                "-H",
                "Authorization: Bearer eyJhbGciOi.x.y",
                "-H",
                "Accept: */*"
            ]),
            [
                "curl",
                "-H",
                "Authorization: [redacted]",
                "-H",
                "Accept: */*"
            ]
        );
        // A shell command is read word by word.
        assert_eq!(
            args(&["sh", "-c", "exec worker --secret s3 --queue jobs"]),
            ["sh", "-c", "exec worker --secret [redacted] --queue jobs"]
        );
        // Short options are not guessed; a switch or a file option leaves the next word; a
        // secret option followed by another option has no value to hide.
        // (The MySQL clients' `-pSECRET` is known: `short_options_of_known_clients_…`.)
        let kept = [
            "app",
            "-u",
            "root",
            "-pSECRET",
            "-p",
            "x",
            "--password-file",
            "/run/secrets/db",
            "--password-stdin",
            "registry.example",
            "PASSWORD_FILE=/run/secrets/pw",
            "--token",
            "--verbose",
            "--password=",
            "a=b",
        ];
        assert_eq!(args(&kept), kept);
        assert!(args(&[]).is_empty());
    }

    fn sql(q: &str) -> String {
        redact_sql(q).into_owned()
    }

    #[test]
    fn passwords_in_sql_are_redacted_postgres_forms() {
        for (q, want) in [
            (
                "ALTER USER app PASSWORD 'Hunter2'",
                "ALTER USER app PASSWORD '[redacted]'",
            ),
            (
                "alter role app with encrypted password 'md5abc'",
                "alter role app with encrypted password '[redacted]'",
            ),
            (
                "CREATE ROLE r LOGIN PASSWORD 'pw' VALID UNTIL '2027-01-01'",
                "CREATE ROLE r LOGIN PASSWORD '[redacted]' VALID UNTIL '2027-01-01'",
            ),
            (
                "CREATE USER bob WITH PASSWORD $$s3'cr$$",
                "CREATE USER bob WITH PASSWORD $$[redacted]$$",
            ),
            (
                "ALTER USER bob PASSWORD $pw$x$pw$;",
                "ALTER USER bob PASSWORD $pw$[redacted]$pw$;",
            ),
            // What psql's \password sends: the SCRAM verifier.
            (
                "ALTER USER postgres PASSWORD 'SCRAM-SHA-256$4096:c2FsdA==$a:b'",
                "ALTER USER postgres PASSWORD '[redacted]'",
            ),
            (
                "ALTER ROLE x PASSWORD 'it''s'",
                "ALTER ROLE x PASSWORD '[redacted]'",
            ),
            (
                "UPDATE users SET password = 'pw' WHERE id = 1",
                "UPDATE users SET password = '[redacted]' WHERE id = 1",
            ),
        ] {
            assert_eq!(sql(q), want, "{q}");
        }
    }

    #[test]
    fn passwords_in_sql_are_redacted_mysql_forms() {
        for (q, want) in [
            (
                "CREATE USER 'bob'@'%' IDENTIFIED BY 'Hunter2'",
                "CREATE USER 'bob'@'%' IDENTIFIED BY '[redacted]'",
            ),
            (
                "ALTER USER 'bob'@'localhost' IDENTIFIED WITH mysql_native_password BY \"pw\"",
                "ALTER USER 'bob'@'localhost' IDENTIFIED WITH mysql_native_password BY \"[redacted]\"",
            ),
            (
                "ALTER USER u IDENTIFIED BY 'new' REPLACE 'old', v IDENTIFIED BY 'w'",
                "ALTER USER u IDENTIFIED BY '[redacted]' REPLACE '[redacted]', v IDENTIFIED BY '[redacted]'",
            ),
            (
                "GRANT ALL ON *.* TO 'u'@'h' IDENTIFIED BY PASSWORD '*2470C0C06DEE42FD'",
                "GRANT ALL ON *.* TO 'u'@'h' IDENTIFIED BY PASSWORD '[redacted]'",
            ),
            ("SET PASSWORD = 'pw'", "SET PASSWORD = '[redacted]'"),
            (
                "SET PASSWORD FOR 'bob'@'%' = PASSWORD('pw')",
                "SET PASSWORD FOR 'bob'@'%' = PASSWORD('[redacted]')",
            ),
            (
                "set password for bob = 'p\\'w'",
                "set password for bob = '[redacted]'",
            ),
        ] {
            assert_eq!(sql(q), want, "{q}");
        }
    }

    #[test]
    fn sql_without_passwords_is_kept() {
        for q in [
            "SELECT password_hash FROM users WHERE name = 'ann'",
            "SELECT 'password' AS label, x FROM t",
            "SELECT * FROM t -- password 'x'",
            "SELECT $1, $2 FROM t WHERE a = 'identified'",
            "INSERT INTO t (a) VALUES ('b')",
            "ALTER USER bob PASSWORD NULL",
            "",
        ] {
            assert!(matches!(redact_sql(q), Cow::Borrowed(_)), "{q}");
        }
        // Cut short (the snaplen): what follows the keyword goes.
        assert_eq!(
            sql("ALTER USER a PASSWORD 'abc"),
            "ALTER USER a PASSWORD '[redacted]"
        );
    }

    #[test]
    fn percent_encoded_secret_names_are_secret() {
        assert_eq!(
            r("/login?user=a&pass%77ord=hunter2"),
            "/login?user=a&pass%77ord=[redacted]"
        );
        assert_eq!(r("/x?%74oken=t&a=b"), "/x?%74oken=[redacted]&a=b");
        assert_eq!(r("/x?api%5Fkey=k"), "/x?api%5Fkey=[redacted]");
        assert_eq!(r("/x?pass%2577ord=k"), "/x?pass%2577ord=[redacted]");
        assert_eq!(
            h("https://a/?PASS%57ORD=k"),
            "https://a/?PASS%57ORD=[redacted]"
        );
        assert_eq!(r("/x?q=%41&page=2"), "/x?q=%41&page=2");
    }

    #[test]
    fn short_options_of_known_clients_are_redacted() {
        assert_eq!(
            args(&[
                "redis-cli",
                "-h",
                "db",
                "-a",
                "RedisPw",
                "ping",
                "--no-auth-warning"
            ]),
            [
                "redis-cli",
                "-h",
                "db",
                "-a",
                "[redacted]",
                "ping",
                "--no-auth-warning"
            ]
        );
        assert_eq!(
            args(&["/usr/bin/redis-cli", "--pass", "RedisPw", "--askpass"]),
            ["/usr/bin/redis-cli", "--pass", "[redacted]", "--askpass"]
        );
        assert_eq!(
            args(&[
                "curl",
                "-u",
                "ann:CurlPw",
                "-U",
                "proxy:ProxyPw",
                "https://x/"
            ]),
            [
                "curl",
                "-u",
                "ann:[redacted]",
                "-U",
                "proxy:[redacted]",
                "https://x/"
            ]
        );
        assert_eq!(
            args(&[
                "curl",
                "-uann:CurlPw",
                "--user",
                "bob:pw2",
                "--user=c:pw3",
                "-u",
                "justuser"
            ]),
            [
                "curl",
                "-uann:[redacted]",
                "--user",
                "bob:[redacted]",
                "--user=c:[redacted]",
                "-u",
                "justuser"
            ]
        );
        assert_eq!(
            args(&[
                "mysql",
                "-u",
                "root",
                "-pMyPw",
                "-p",
                "shop",
                "--password=Pw2",
                "-h",
                "db"
            ]),
            [
                "mysql",
                "-u",
                "root",
                "-p[redacted]",
                "-p",
                "shop",
                "--password=[redacted]",
                "-h",
                "db"
            ]
        );
        assert_eq!(
            args(&["mariadb-dump", "-pX", "db"]),
            ["mariadb-dump", "-p[redacted]", "db"]
        );
        assert_eq!(
            args(&["sshpass", "-p", "SshPw", "ssh", "host"]),
            ["sshpass", "-p", "[redacted]", "ssh", "host"]
        );
        // In a shell command, word by word; the options of other programs are not guessed.
        assert_eq!(
            args(&["sh", "-c", "redis-cli -a RedisPw get k && ls -a x"]),
            ["sh", "-c", "redis-cli -a [redacted] get k && ls -a x"]
        );
        let kept = ["ls", "-a", "x", "grep", "-pX", "tar", "-u", "a:b"];
        assert_eq!(args(&kept), kept);
    }
}
