/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=1 name=HTTP1 rule=is_http1 sockets=any */

/*
 * After an HTTP method at p[i]: the start of a request target (`/`, `*`, `http://`) or the end
 * of the capture; a word there (`GET key`) is a Redis inline command, not HTTP.
 */
static __always_inline bool http_target(const __u8 *p, __u32 n, __u32 i)
{
	return n <= i || p[i] == '/' || p[i] == '*' || p[i] == 'h' || p[i] == 'H';
}

/* HTTP/1.x: a request line's method and the start of its target, or a status line. */
static __always_inline bool is_http1(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
	return (starts_with(p, n, "GET ", 4) && http_target(p, n, 4)) ||
	       (starts_with(p, n, "POST ", 5) && http_target(p, n, 5)) ||
	       (starts_with(p, n, "PUT ", 4) && http_target(p, n, 4)) ||
	       (starts_with(p, n, "HEAD ", 5) && http_target(p, n, 5)) ||
	       (starts_with(p, n, "DELETE ", 7) && http_target(p, n, 7)) ||
	       (starts_with(p, n, "PATCH ", 6) && http_target(p, n, 6)) ||
	       (starts_with(p, n, "OPTIONS ", 8) && http_target(p, n, 8)) ||
	       starts_with(p, n, "CONNECT ", 8) ||
	       (starts_with(p, n, "TRACE ", 6) && http_target(p, n, 6)) ||
	       starts_with(p, n, "HTTP/1.", 7);
}
