/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=3 name=MEMCACHED rule=is_memcached sockets=any */

/*
 * A memcached command: a text or meta command, lower case as memcached requires, followed by a
 * space or the line end (`get `, `set `, `mg `, `mn\r`, `stats\r`, …; longer names by their
 * first 8 bytes), or a binary request header: magic 0x80, a known opcode (0x00–0x24 but 0x1f),
 * key length ≤ 250, extras ≤ 20 bytes, raw data type. The first byte picks the candidates, so
 * each payload is compared with a few literals at most.
 */
static __always_inline bool is_memcached(const __u8 *p, __u32 n, bool dgram, __u64 pos)
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
