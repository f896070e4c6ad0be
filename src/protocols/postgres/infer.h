/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=5 name=POSTGRES rule=is_postgres sockets=stream */

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
static __always_inline bool is_postgres(const __u8 *p, __u32 n, bool dgram, __u64 pos)
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
