/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=7 name=HTTP2 rule=is_http2 sockets=stream */

/*
 * HTTP/2 (cleartext): the client preface (its first 15 bytes, `PRI * HTTP/2.0\r`), or a frame
 * header a connection shows first or first after ebtop started: the server's SETTINGS (stream
 * 0, a multiple of 6 bytes up to 60; an ACK empty), a WINDOW_UPDATE (4 bytes, no flags, stream 0
 * or odd), a PING (8 bytes, stream 0), or HEADERS (1–16384 bytes) or DATA (up to 16384) on an
 * odd (client-initiated) stream with only the flags their type defines. Tried last: the frame
 * rules are the loosest. User space's rule (protocols/http2) is the same; for the preface it
 * also compares what follows the 15 bytes, as far as the payload goes.
 */
static __always_inline bool is_http2(const __u8 *p, __u32 n, bool dgram, __u64 pos)
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
