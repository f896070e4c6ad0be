/* SPDX-License-Identifier: GPL-2.0 */
/* ebtop-kernel-rule: id=10 name=MONGODB rule=is_mongodb sockets=stream */

/*
 * A MongoDB message header (15 of its 16 bytes): messageLength 21 bytes to 64 MiB, then either
 * a request (responseTo 0) of opCode OP_MSG (2013), OP_QUERY (2004, the legacy handshake) or
 * OP_COMPRESSED (2012), or a reply (responseTo set) of OP_MSG or OP_COMPRESSED: a connection
 * open before ebtop started shows either side first, and a server reads the 16-byte header
 * apart from the body, so the header alone decides. The opCode's last byte is beyond the 15
 * read: its first three are compared. User space's rule (protocols/mongodb) checks the body too.
 */
static __always_inline bool is_mongodb(const __u8 *p, __u32 n, bool dgram, __u64 pos)
{
	if (n < 15 || p[3] > 0x03 || p[14] != 0 || p[13] != 0x07)
		return false;
	__u32 len = (__u32)p[0] | (__u32)p[1] << 8 | (__u32)p[2] << 16 | (__u32)p[3] << 24;
	if (len < 21)
		return false;
	bool request = !p[8] && !p[9] && !p[10] && !p[11];
	if (p[12] == 0xdd || p[12] == 0xdc) /* OP_MSG, OP_COMPRESSED */
		return true;
	return request && p[12] == 0xd4; /* OP_QUERY */
}
