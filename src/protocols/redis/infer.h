/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=2 name=REDIS rule=is_redis sockets=any */

/*
 * A RESP message start whose first bytes leave little doubt (user space confirms before any
 * call is counted): an array of bulk strings, the form every client sends commands in and
 * multi-bulk replies take (`*3\r\n$3\r\n`: 1–4 digits, CRLF, `$`), or a reply a
 * connection already open when ebtop started may show first: `+OK\r\n`, `+PONG\r\n`,
 * `+QUEUED`, `-ERR `, `-WRONGTYPE`, `:<digits>\r\n`, `$<digits>\r\n`, `$-1\r\n`.
 */
static __always_inline bool is_redis(const __u8 *p, __u32 n, bool dgram, __u64 pos)
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
