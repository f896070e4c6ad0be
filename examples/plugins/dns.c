/* dns: DNS over UDP as an ebtop datagram parse plugin (ABI 1 with `transport=udp`,
 * docs/plugins.md), in C with no libc. tests/live_plugins.rs records dig against a real
 * dnsmasq and diffs this plugin's calls with the built-in DNS parser's on the same recording.
 * Build:
 *
 *   clang --target=wasm32 -O2 -mbulk-memory -nostdlib -Wl,--no-entry -o dns.wasm dns.c
 *
 * Each datagram is one message (ebtop does no framing on a datagram socket): a query is a
 * request named like the built-in parser names it (method: the opcode, resource: "TYPE name"
 * with the class when not IN), a response answers it with the rcode's name and outcome and
 * the record counts and id as attributes. Pairing key: the id + 1; ebtop pairs per peer, so
 * two clients' queries with the same id on one server socket stay apart. What the built-in
 * parser does and this plugin does not: EDNS's extended rcode bits (the OPT record's), the
 * check that a response repeats its query's question, `flags`, `addresses` and
 * `edns_udp_size`, a timeout for queries never answered, DNS over TCP. */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#ifndef PORTS
#define PORTS "53"
#endif
__asm__(".section .custom_section.ebtop.plugin,\"\",@\n"
        ".ascii \"name=dns\\nabi=1\\nkind=parse\\nports=" PORTS "\\ntransport=udp\\n\"\n"
        ".text\n");

#define HEADER 96
#define KIND_REQUEST 1
#define KIND_RESPONSE 2
#define OUT_OK 0
#define OUT_CLIENT_ERROR 1
#define OUT_SERVER_ERROR 2

static u8 buf[65536] __attribute__((aligned(8)));
/* The answer is built here, then copied over the buffer's start (which holds the input). */
static u8 out[4096];
static u32 at; /* bytes of `out` written */

__attribute__((export_name("ebtop_buffer"))) int ebtop_buffer(void) { return (int)(long)buf; }

/* A datagram plugin is never asked to frame; the export is part of the parse ABI. */
__attribute__((export_name("ebtop_frame"))) long long ebtop_frame(int len) {
    (void)len;
    return -1;
}

static u16 be16(const u8 *p) { return (u16)(p[0] << 8 | p[1]); }

static void put(const char *s, u32 n) {
    for (u32 i = 0; i < n && at < sizeof out; i++) out[at++] = (u8)s[i];
}
static u32 slen(const char *s) {
    u32 n = 0;
    while (s[n]) n++;
    return n;
}
static void puts_(const char *s) { put(s, slen(s)); }
static void putu(u32 v) {
    char d[10];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) {
        char c = d[--n];
        put(&c, 1);
    }
}

static const char *type_name(u16 t) {
    switch (t) {
    case 1: return "A";
    case 2: return "NS";
    case 5: return "CNAME";
    case 6: return "SOA";
    case 12: return "PTR";
    case 13: return "HINFO";
    case 15: return "MX";
    case 16: return "TXT";
    case 28: return "AAAA";
    case 33: return "SRV";
    case 35: return "NAPTR";
    case 39: return "DNAME";
    case 41: return "OPT";
    case 43: return "DS";
    case 46: return "RRSIG";
    case 47: return "NSEC";
    case 48: return "DNSKEY";
    case 50: return "NSEC3";
    case 52: return "TLSA";
    case 64: return "SVCB";
    case 65: return "HTTPS";
    case 99: return "SPF";
    case 251: return "IXFR";
    case 252: return "AXFR";
    case 255: return "ANY";
    case 257: return "CAA";
    }
    return 0;
}
static const char *class_name(u16 c) {
    switch (c) {
    case 1: return "IN";
    case 3: return "CH";
    case 4: return "HS";
    case 254: return "NONE";
    case 255: return "ANY";
    }
    return 0;
}
static const char *rcode_name(u16 r) {
    switch (r) {
    case 0: return "NOERROR";
    case 1: return "FORMERR";
    case 2: return "SERVFAIL";
    case 3: return "NXDOMAIN";
    case 4: return "NOTIMP";
    case 5: return "REFUSED";
    case 6: return "YXDOMAIN";
    case 7: return "YXRRSET";
    case 8: return "NXRRSET";
    case 9: return "NOTAUTH";
    case 10: return "NOTZONE";
    case 11: return "DSOTYPENI";
    }
    return 0;
}
static int rcode_outcome(u16 r) {
    if (r == 0) return OUT_OK;
    if (r == 1 || r == 3 || (r >= 5 && r <= 10)) return OUT_CLIENT_ERROR;
    return OUT_SERVER_ERROR;
}
static const char *opcode_name(u8 op) {
    switch (op) {
    case 0: return "QUERY";
    case 1: return "IQUERY";
    case 2: return "STATUS";
    case 4: return "NOTIFY";
    case 5: return "UPDATE";
    case 6: return "DSO";
    }
    return "OPCODE?";
}

/* The question's name at `off` of the message `m` (`n` bytes) as text, lowercase, `.` and `\`
 * escaped, other bytes as \DDD; compression pointers followed backwards only (so it ends).
 * Returns the offset past the name where it sits, or 0 when it is malformed or cut. */
static u32 read_name(const u8 *m, u32 n, u32 off) {
    u32 end = 0, wire = 0, start = at;
    for (int labels = 0; labels < 128; labels++) {
        if (off >= n) return 0;
        u32 len = m[off];
        if (len == 0) {
            if (at == start) put(".", 1);
            return end ? end : off + 1;
        }
        if (len <= 63) {
            if (off + 1 + len > n) return 0;
            wire += len + 1;
            if (wire > 255) return 0;
            if (at != start) put(".", 1);
            for (u32 i = 0; i < len; i++) {
                u8 c = m[off + 1 + i];
                if (c == '.' || c == '\\') {
                    put("\\", 1);
                    put((const char *)&c, 1);
                } else if (c >= 0x21 && c <= 0x7e) {
                    if (c >= 'A' && c <= 'Z') c += 32;
                    put((const char *)&c, 1);
                } else {
                    char e[4] = {'\\', (char)('0' + c / 100), (char)('0' + c / 10 % 10),
                                 (char)('0' + c % 10)};
                    put(e, 4);
                }
            }
            off += 1 + len;
        } else if (len >= 0xc0) {
            if (off + 1 >= n) return 0;
            u32 target = (len & 0x3f) << 8 | m[off + 1];
            if (target >= off) return 0;
            if (!end) end = off + 2;
            off = target;
        } else {
            return 0;
        }
    }
    return 0;
}

/* Starts an answer: kind, outcome (255: not said), key; strings are added after the fixed part,
 * and their lengths set by `finish`. */
static void begin(u8 kind, u8 outcome, u64 key) {
    for (int i = 0; i < 24; i++) out[i] = 0;
    out[0] = kind;
    out[1] = outcome;
    for (int i = 0; i < 8; i++) out[8 + i] = (u8)(key >> (8 * i));
    at = 24;
}
static void set_len(int field, u32 n) {
    out[16 + 2 * field] = (u8)n;
    out[17 + 2 * field] = (u8)(n >> 8);
}
static void attr_u(const char *key, u32 v) {
    u32 k = slen(key), p = at;
    at += 4;
    puts_(key);
    putu(v);
    u32 vlen = at - p - 4 - k;
    out[p] = (u8)k;
    out[p + 1] = 0;
    out[p + 2] = (u8)vlen;
    out[p + 3] = (u8)(vlen >> 8);
    out[2]++;
}
static int finish(void) {
    for (u32 i = 0; i < at; i++) buf[i] = out[i];
    return (int)at;
}

__attribute__((export_name("ebtop_message"))) int ebtop_message(int len) {
    const u8 *m = buf + HEADER;
    u32 n = (u32)len;
    if (n < 12) return -1;
    u16 id = be16(m), flags = be16(m + 2), qd = be16(m + 4);
    u64 key = (u64)id + 1;
    if (!(flags & 0x8000)) {
        /* A query: named by its one question, as the built-in parser does. */
        if (qd != 1) return -1;
        begin(KIND_REQUEST, 255, key);
        puts_(opcode_name((u8)(flags >> 11 & 0xf)));
        set_len(0, at - 24);
        u32 rstart = at;
        /* The type goes first: read the name into place after it is known. */
        u32 name_at = at;
        u32 qend = read_name(m, n, 12);
        if (!qend || qend + 4 > n) return -1;
        u32 name_len = at - name_at;
        u8 name[1024];
        if (name_len > sizeof name) return -1;
        for (u32 i = 0; i < name_len; i++) name[i] = out[name_at + i];
        at = rstart;
        u16 qtype = be16(m + qend), qclass = be16(m + qend + 2);
        const char *t = type_name(qtype);
        if (t) {
            puts_(t);
        } else {
            puts_("TYPE");
            putu(qtype);
        }
        put(" ", 1);
        put((const char *)name, name_len);
        if (qclass != 1) {
            put(" ", 1);
            const char *c = class_name(qclass);
            if (c) {
                puts_(c);
            } else {
                puts_("CLASS");
                putu(qclass);
            }
        }
        set_len(1, at - rstart);
        return finish();
    }
    u16 rcode = flags & 0xf;
    begin(KIND_RESPONSE, (u8)rcode_outcome(rcode), key);
    const char *r = rcode_name(rcode);
    if (r) {
        puts_(r);
    } else {
        puts_("RCODE");
        putu(rcode);
    }
    set_len(2, at - 24);
    attr_u("answers", be16(m + 6));
    attr_u("authority", be16(m + 8));
    attr_u("additional", be16(m + 10));
    attr_u("txid", id);
    return finish();
}
