/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Protocol recognition from the first (up to 15) bytes of a connection's first payload: cheap,
 * and allowed to be wrong the safe way (user space confirms before any call is counted, and a
 * connection recognised as nothing is only counted, never copied). One rule per protocol;
 * infer.bpf.c runs this very code on a labelled corpus in the tests (the confusion matrix).
 */
#ifndef EBTOP_INFER_H
#define EBTOP_INFER_H

static __always_inline bool starts_with(const __u8 *p, __u32 n, const char *lit, __u32 litlen)
{
	if (n < litlen)
		return false;
	for (__u32 i = 0; i < litlen && i < 8; i++)
		if (p[i] != (__u8)lit[i])
			return false;
	return true;
}

static __always_inline bool is_digit(__u8 c)
{
	return c >= '0' && c <= '9';
}

/*
 * After an HTTP method at p[i]: the start of a request target (`/`, `*`, `http://`) or the end
 * of the capture; a word there (`GET key`) is a Redis inline command, not HTTP.
 */
static __always_inline bool http_target(const __u8 *p, __u32 n, __u32 i)
{
	return n <= i || p[i] == '/' || p[i] == '*' || p[i] == 'h' || p[i] == 'H';
}

/*
 * A RESP message start whose first bytes leave little doubt (user space confirms before any
 * call is counted): an array of bulk strings, the form every client sends commands in and
 * multi-bulk replies take (`*3\r\n$3\r\n`: 1–4 digits, CRLF, `$`), or a reply a
 * connection already open when ebtop started may show first: `+OK\r\n`, `+PONG\r\n`,
 * `+QUEUED`, `-ERR `, `-WRONGTYPE`, `:<digits>\r\n`, `$<digits>\r\n`, `$-1\r\n`.
 */
static __always_inline bool is_redis(const __u8 *p, __u32 n)
{
	if (n < 4)
		return false;
	if (p[0] == '$' && p[1] == '-')
		return p[2] == '1' && p[3] == '\r';
	if (p[0] == '*' || p[0] == '$' || p[0] == ':') {
		/* The 8 bytes as one word: bytes at a variable index are shifts, not stack pointer
		 * arithmetic (which the verifier refuses once the compiler turns it into an OR). */
		__u64 w;
		__builtin_memcpy(&w, p, 8);
		/* 1–4 digits (no leading zero), then CR LF (or the capture ends after the CR). */
		__u32 d = 1;
		while (d < 5 && is_digit((w >> (d * 8)) & 0xff))
			d++;
		if (d == 1 || (p[1] == '0' && d > 2))
			return false;
		if (d >= n || ((w >> (d * 8)) & 0xff) != '\r' ||
		    (d + 1 < n && ((w >> ((d + 1) * 8)) & 0xff) != '\n'))
			return false;
		/* An array's first element must be a bulk string (if captured). */
		return p[0] != '*' || d + 2 >= n || ((w >> ((d + 2) * 8)) & 0xff) == '$';
	}
	return starts_with(p, n, "+OK\r\n", 5) || starts_with(p, n, "+PONG\r\n", 7) ||
	       starts_with(p, n, "+QUEUED\r", 8) || starts_with(p, n, "-ERR ", 5) ||
	       starts_with(p, n, "-WRONGTY", 8);
}

/*
 * A DNS header (RFC 1035) at h, `avail` bytes of it captured: opcode QUERY, Z clear, exactly
 * one question; a query also has no answer or authority records, at most 2 additional ones
 * (EDNS OPT, TSIG), rcode 0 and none of AA, TC, RA; a response at most 1024 records. The
 * question's first label is at most 63 bytes (if captured). User space's rule
 * (protocols/dns.rs) is this plus the whole question.
 */
static __always_inline bool dns_header_ok(const __u8 *h, __u32 avail)
{
	if (avail < 12)
		return false;
	if ((h[2] & 0x78) || (h[3] & 0x40) || h[4] || h[5] != 1)
		return false;
	if (h[2] & 0x80) {
		__u32 records = ((__u32)h[6] << 8 | h[7]) + ((__u32)h[8] << 8 | h[9]) +
				((__u32)h[10] << 8 | h[11]);
		if (records > 1024)
			return false;
	} else if ((h[2] & 0x06) || (h[3] & 0x8f) || h[6] || h[7] || h[8] || h[9] || h[10] ||
		   h[11] > 2) {
		return false;
	}
	return avail < 13 || h[12] <= 63;
}

/*
 * DNS: a datagram is one message; on a stream each message follows its 2-byte length, which a
 * server may read apart (dnsmasq reads it a byte at a time): a header at stream position 2 is
 * taken as the first message.
 */
static __always_inline bool is_dns(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
	if (dgram || pos == 2)
		return dns_header_ok(p, n);
	if (n < 14 || ((__u32)p[0] << 8 | p[1]) < 17)
		return false;
	return dns_header_ok(p + 2, n - 2);
}

/*
 * A memcached command: a text or meta command, lower case as memcached requires, followed by a
 * space or the line end (`get `, `set `, `mg `, `mn\r`, `stats\r`, …; longer names by their
 * first 8 bytes), or a binary request header: magic 0x80, a known opcode (0x00–0x24 but 0x1f),
 * key length ≤ 250, extras ≤ 20 bytes, raw data type. The first byte picks the candidates, so
 * each payload is compared with a few literals at most.
 */
static __always_inline bool is_memcached(const __u8 *p, __u32 n)
{
	if (n < 3)
		return false;
	switch (p[0]) {
	case 0x80:
		return n >= 8 && p[1] <= 0x24 && p[1] != 0x1f && p[2] == 0 && p[3] <= 250 &&
		       p[4] <= 20 && p[5] == 0;
	case 'g':
		return starts_with(p, n, "get ", 4) || starts_with(p, n, "gets ", 5) ||
		       starts_with(p, n, "gat ", 4) || starts_with(p, n, "gats ", 5);
	case 's':
		return starts_with(p, n, "set ", 4) || starts_with(p, n, "stats\r", 6) ||
		       starts_with(p, n, "stats ", 6) || starts_with(p, n, "shutdown", 8) ||
		       starts_with(p, n, "slabs ", 6);
	case 'a':
		return starts_with(p, n, "add ", 4) || starts_with(p, n, "append ", 7);
	case 'r':
		return starts_with(p, n, "replace ", 8);
	case 'p':
		return starts_with(p, n, "prepend ", 8);
	case 'c':
		return starts_with(p, n, "cas ", 4) || starts_with(p, n, "cache_me", 8);
	case 'd':
		return starts_with(p, n, "delete ", 7) || starts_with(p, n, "decr ", 5);
	case 'i':
		return starts_with(p, n, "incr ", 5);
	case 't':
		return starts_with(p, n, "touch ", 6);
	case 'f':
		return starts_with(p, n, "flush_al", 8);
	case 'v':
		return starts_with(p, n, "version\r", 8) || starts_with(p, n, "verbosit", 8);
	case 'l':
		return starts_with(p, n, "lru_craw", 8);
	case 'm':
		/* Meta commands: mg ms md ma me with a key, mn alone. */
		return (p[2] == ' ' && (p[1] == 'g' || p[1] == 's' || p[1] == 'd' || p[1] == 'a' ||
					p[1] == 'e')) ||
		       starts_with(p, n, "mn\r", 3);
	}
	return false;
}

static __always_inline bool is_alpha(__u8 c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Could SQL text start with c (a keyword, a parenthesised query, a comment)? */
static __always_inline bool sql_start(__u8 c)
{
	return is_alpha(c) || c == '(' || c == '/';
}

/*
 * PostgreSQL (protocol 3.0), a client's message: a StartupMessage (length ≤ 10000, version 3.0,
 * a lower-case parameter name first), an SSLRequest or GSSENCRequest, or — on a connection open
 * before ebtop started — a simple query (`Q`), a Parse (`P`: a statement name) or a Bind (`B`:
 * a portal and a statement name; what a client sends that prepared its statements earlier)
 * whose length is plausible (up to 64 MiB) and whose names are printable bytes ended by NUL;
 * then the SQL of `Q`/`P` starts with a letter, `(` or `/` after any whitespace, and `B`'s
 * parameter format count is under 4096. Fully unrolled: every index is a constant. User
 * space's rule (protocols/postgres.rs) is the same on the whole payload.
 */
static __always_inline bool is_postgres(const __u8 *p, __u32 n)
{
	if (n >= 8 && p[0] == 0 && p[1] == 0) {
		__u32 len = (__u32)p[2] << 8 | p[3];
		if (p[4] == 0x04 && p[5] == 0xd2 && p[6] == 0x16 && (p[7] == 0x2f || p[7] == 0x30))
			return len == 8;
		if (p[4] == 0 && p[5] == 3 && p[6] == 0 && p[7] == 0)
			return len >= 9 && len <= 10000 && (n < 9 || (p[8] >= 'a' && p[8] <= 'z'));
		return false;
	}
	if (n < 6 || (p[0] != 'Q' && p[0] != 'P' && p[0] != 'B'))
		return false;
	bool bind = p[0] == 'B';
	__u32 len = (__u32)p[1] << 24 | (__u32)p[2] << 16 | (__u32)p[3] << 8 | p[4];
	if (len < (bind ? 12 : 6) || len > (64u << 20))
		return false;
	__u32 names = bind ? 2 : p[0] == 'P' ? 1 : 0;
#pragma unroll
	for (__u32 i = 5; i < 15; i++) {
		if (i >= n)
			return true; /* the capture ends first: user space decides */
		if (i > len)
			return false; /* the message ends first */
		__u8 c = p[i];
		if (names) {
			if (c == 0)
				names--;
			else if (c <= ' ' || c > '~')
				return false;
			continue;
		}
		if (bind)
			return c < 0x10;
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f')
			continue;
		if (!sql_start(c))
			return false;
		if (i + 1 > len)
			return false; /* one byte of SQL: too short to say */
		/* The second byte too, when the capture holds it. */
		return i + 1 >= n || sql_start(p[i + 1]) || p[i + 1] == '-';
	}
	return true;
}

/*
 * MySQL / MariaDB: the server's greeting (a packet of 20–1024 bytes, sequence id 0, protocol
 * 10, a version string starting with a digit), or — on a connection open before ebtop
 * started — a client's command packet (sequence id 0): COM_QUERY or COM_STMT_PREPARE whose SQL
 * starts with two letters, `(` or `/*` after any whitespace; COM_PING alone (length 1);
 * COM_INIT_DB of a database name (2–64 bytes: letters, digits, `_`, `$`); COM_STMT_EXECUTE of one
 * iteration (a statement prepared before ebtop started); or a server's reply that leaves no
 * doubt (a result set's column count and first definition, catalog `def`; an ERR with its
 * SQLSTATE): a server reads a command's header apart from its body, so on a connection open
 * before ebtop started its side is recognised by what it sends. Fully unrolled.
 * User space's rule (protocols/mysql.rs) is the same on the whole payload.
 */
static __always_inline bool is_mysql(const __u8 *p, __u32 n)
{
	if (n >= 13 && p[3] == 1) {
		/* A server's reply: a column count, then a definition of catalog `def`; or an ERR. */
		if (p[4] == 0xff)
			return p[2] == 0 && p[1] < 0x10 && p[7] == '#';
		if (p[1] || p[2] || !p[4] || p[4] > 250)
			return false;
		if (p[0] == 1)
			return p[8] == 2 && p[9] == 3 && p[10] == 'd' && p[11] == 'e' && p[12] == 'f';
		/* MariaDB: the count and a byte 1 (its definitions follow: metadata caching). */
		return p[0] == 2 && p[5] == 1 && n >= 14 && p[9] == 2 && p[10] == 3 &&
		       p[11] == 'd' && p[12] == 'e' && p[13] == 'f';
	}
	if (n < 5 || p[3] != 0)
		return false;
	__u32 len = (__u32)p[0] | (__u32)p[1] << 8 | (__u32)p[2] << 16;
	if (p[4] == 10 && n >= 6) /* the greeting */
		return len >= 20 && len <= 1024 && is_digit(p[5]);
	if (p[4] == 0x17) /* COM_STMT_EXECUTE: flags, then an iteration count of 1 */
		return len >= 10 && n >= 14 && p[9] <= 0x0f && p[10] == 1 && !p[11] && !p[12] &&
		       !p[13];
	if (p[4] == 0x0e) /* COM_PING */
		return len == 1 && n == 5;
	if (p[4] == 0x02) { /* COM_INIT_DB */
		if (len < 3 || len > 65)
			return false;
#pragma unroll
		for (__u32 i = 5; i < 15; i++) {
			if (i >= n || i >= len + 4)
				return true;
			__u8 c = p[i];
			if (!is_alpha(c) && !is_digit(c) && c != '_' && c != '$')
				return false;
		}
		return true;
	}
	if (p[4] != 0x03 && p[4] != 0x16) /* COM_QUERY, COM_STMT_PREPARE */
		return false;
	if (len < 3)
		return false;
#pragma unroll
	for (__u32 i = 5; i < 14; i++) {
		if (i + 1 >= n)
			return true; /* the capture ends first: user space decides */
		if (i + 1 >= len + 4)
			return false; /* less than two bytes of SQL */
		__u8 c = p[i];
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
			continue;
		if (c == '(')
			return true;
		if (c == '/')
			return p[i + 1] == '*';
		return is_alpha(c) && is_alpha(p[i + 1]);
	}
	return true;
}

/*
 * HTTP/2 (cleartext): the client preface (its first 15 bytes, `PRI * HTTP/2.0\r`), or a frame
 * header a connection shows first or first after ebtop started: the server's SETTINGS (stream
 * 0, a multiple of 6 bytes up to 60; an ACK empty), a WINDOW_UPDATE (4 bytes, no flags, stream 0
 * or odd), a PING (8 bytes, stream 0), or HEADERS (1–16384 bytes) or DATA (up to 16384) on an
 * odd (client-initiated) stream with only the flags their type defines. Tried last: the frame
 * rules are the loosest. User space's rule (protocols/http2) is the same; for the preface it
 * also compares what follows the 15 bytes, as far as the payload goes.
 */
static __always_inline bool is_http2(const __u8 *p, __u32 n)
{
	if (n >= 15 && p[0] == 'P')
		return starts_with(p, n, "PRI * HT", 8) && p[8] == 'T' && p[9] == 'P' &&
		       p[10] == '/' && p[11] == '2' && p[12] == '.' && p[13] == '0' && p[14] == '\r';
	if (n < 9 || (p[5] & 0x80))
		return false;
	__u32 len = (__u32)p[0] << 16 | (__u32)p[1] << 8 | p[2];
	__u8 type = p[3], flags = p[4];
	bool stream0 = !p[5] && !p[6] && !p[7] && !p[8];
	bool odd = p[8] & 1;
	switch (type) {
	case 0: /* DATA: END_STREAM, PADDED */
		return odd && !(flags & ~0x09) && len <= 16384;
	case 1: /* HEADERS: END_STREAM, END_HEADERS, PADDED, PRIORITY */
		return odd && !(flags & ~0x2d) && len >= 1 && len <= 16384;
	case 4: /* SETTINGS */
		return stream0 && len % 6 == 0 && len <= 60 && (flags == 0 || (flags == 1 && len == 0));
	case 8: /* WINDOW_UPDATE */
		return len == 4 && flags == 0 && (stream0 || odd);
	case 6: /* PING */
		return len == 8 && !(flags & ~0x01) && stream0;
	}
	return false;
}

/*
 * Recognises the start of a known protocol's message from the first (up to 15) bytes of a
 * payload of a stream or datagram socket (`dgram`), at stream position `pos`.
 */
/*
 * A TLS record on a stream: a handshake record that holds a ClientHello or ServerHello
 * (content type 22, version 3.0–3.4, handshake type 1 or 2), or — for connections open before
 * ebtop started — an application-data record of TLS 1.2/1.3 (type 23, version 3.3, a length
 * no record may exceed: 2^14 plus 2048 of expansion).
 */
static __always_inline bool is_tls(const __u8 *p, __u32 n)
{
	if (n < 5 || p[1] != 3)
		return false;
	__u32 len = ((__u32)p[3] << 8) | p[4];
	if (p[0] == 22)
		return n >= 6 && p[2] <= 4 && len >= 4 && (p[5] == 1 || p[5] == 2);
	return p[0] == 23 && p[2] == 3 && len > 0 && len <= 16384 + 2048;
}

static __always_inline __u8 infer_protocol(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
	if ((starts_with(p, n, "GET ", 4) && http_target(p, n, 4)) ||
	    (starts_with(p, n, "POST ", 5) && http_target(p, n, 5)) ||
	    (starts_with(p, n, "PUT ", 4) && http_target(p, n, 4)) ||
	    (starts_with(p, n, "HEAD ", 5) && http_target(p, n, 5)) ||
	    (starts_with(p, n, "DELETE ", 7) && http_target(p, n, 7)) ||
	    (starts_with(p, n, "PATCH ", 6) && http_target(p, n, 6)) ||
	    (starts_with(p, n, "OPTIONS ", 8) && http_target(p, n, 8)) ||
	    starts_with(p, n, "CONNECT ", 8) ||
	    (starts_with(p, n, "TRACE ", 6) && http_target(p, n, 6)) ||
	    starts_with(p, n, "HTTP/1.", 7))
		return EBTOP_PROTO_HTTP1;
	if (is_redis(p, n))
		return EBTOP_PROTO_REDIS;
	if (is_memcached(p, n))
		return EBTOP_PROTO_MEMCACHED;
	if (is_dns(p, n, dgram, pos))
		return EBTOP_PROTO_DNS;
	if (!dgram && is_postgres(p, n))
		return EBTOP_PROTO_POSTGRES;
	if (!dgram && is_mysql(p, n))
		return EBTOP_PROTO_MYSQL;
	if (!dgram && is_http2(p, n))
		return EBTOP_PROTO_HTTP2;
	if (!dgram && is_tls(p, n))
		return EBTOP_PROTO_TLS;
	return EBTOP_PROTO_UNKNOWN;
}

#endif
