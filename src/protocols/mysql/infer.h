/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=6 name=MYSQL rule=is_mysql sockets=stream */

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
static __always_inline bool is_mysql(const __u8 *p, __u32 n, bool dgram, __u64 pos)
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
