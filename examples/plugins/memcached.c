/* memcached: Memcached's text protocol as an ebtop parse plugin (ABI 1, docs/plugins.md), in C
 * with no libc. tests/live_plugins.rs records a live memcached session and diffs this plugin's
 * calls with the built-in parser's on the same recording. Build:
 *
 *   clang --target=wasm32 -O2 -mbulk-memory -nostdlib -Wl,--no-entry -o memcached.wasm memcached.c
 *
 * Framing: every message starts with a line (FRAME_LINE); a storage command's line and a VALUE
 * line say how long the data block after them is (its bytes + CRLF). A get's reply is its VALUE
 * messages and then END: each VALUE is answered as a part of the next half (kind 3), so the
 * END's call half spans the whole reply, as the built-in parser's does. Calls pair in order
 * by a key the plugin gives each command (its number on the connection), from what it keeps
 * per connection (a table in its memory, by connection id): the commands not yet answered, in
 * order, and the VALUE blocks of the reply in progress (`hits`).
 *
 * `noreply`: memcached answers such a command only when it fails in some ways (a bad data
 * chunk, an object too large); the plugin makes no call of one. A reply that is an error while
 * a noreply command is pending is ambiguous when an answered command follows it (whose error is
 * it?): the plugin pairs it with neither (answered as malformed: `parse.damaged_messages`), and
 * that command is left unanswered (`parse.unanswered_requests` at the close): no call is made
 * that could be wrong. */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

/* The manifest, as a custom section: C has no attribute for one, module-level assembly does.
 * PORTS: the ports claimed (`-DPORTS='"11211,11212"'`). */
#ifndef PORTS
#define PORTS "11211"
#endif
__asm__(".section .custom_section.ebtop.plugin,\"\",@\n"
        ".ascii \"name=memcached\\nabi=1\\nkind=parse\\nports=" PORTS "\\n\"\n"
        ".text\n");

#define HEADER 96
#define FRAME_LINE (2LL << 56)
#define KIND_REQUEST 1
#define KIND_RESPONSE 2
#define KIND_PART 3
#define OUT_OK 0
#define OUT_CLIENT_ERROR 1
#define OUT_SERVER_ERROR 2
#define MAX_KEY 250
#define MAX_NAME 32

static u8 buf[65536] __attribute__((aligned(8)));

__attribute__((export_name("ebtop_buffer"))) int ebtop_buffer(void) { return (int)(long)buf; }

static void *memcpy_(void *d, const void *s, u32 n) {
    u8 *dd = d;
    const u8 *ss = s;
    while (n--) *dd++ = *ss++;
    return d;
}
static void zero(void *d, u32 n) {
    u8 *dd = d;
    while (n--) *dd++ = 0;
}
static u64 rd64(const u8 *p) {
    u64 v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Per connection: the commands sent and not yet answered (a ring), and the reply in progress. */
#define SLOTS 512
#define PROBE 8
#define RING 256 /* ebtop's own bound of pending requests per connection */
/* A ring entry's `what`: the number of keys of a retrieval, or one of these. */
#define ENTRY_PLAIN 0xfffe   /* answered, not a retrieval */
#define ENTRY_NOREPLY 0xffff /* noreply: answered only on an error */
struct entry {
    u32 seq; /* the command's number on the connection: its pairing key is seq + 1 */
    u16 what;
};
struct conn {
    u64 id; /* 0: free */
    u32 hits;
    u32 seq;
    u16 head, len;
    u8 overflow; /* the ring overflowed: whose a reply is stays unknown on this connection */
    struct entry ring[RING];
};
static struct conn conns[SLOTS];
static u32 clock_hand;

/* The connection's state; a new one (reused slot) when it is not found. */
static struct conn *conn_of(u64 id) {
    u32 h = (u32)((id * 0x9E3779B97F4A7C15ULL) >> 55); /* 9 bits: 512 slots */
    for (u32 i = 0; i < PROBE; i++) {
        struct conn *c = &conns[(h + i) % SLOTS];
        if (c->id == id) return c;
    }
    for (u32 i = 0; i < PROBE; i++) {
        struct conn *c = &conns[(h + i) % SLOTS];
        if (c->id == 0) {
            c->id = id;
            return c;
        }
    }
    /* Full around it: one of its slots is taken over (that connection starts unknown again). */
    struct conn *c = &conns[(h + (clock_hand++ % PROBE)) % SLOTS];
    zero(c, sizeof *c);
    c->id = id;
    return c;
}

/* Queues a command; its pairing key. */
static u64 push(struct conn *c, u16 what) {
    u32 seq = c->seq++;
    if (c->len == RING) {
        c->overflow = 1;
        return (u64)seq + 1;
    }
    c->ring[(c->head + c->len) % RING] = (struct entry){seq, what};
    c->len++;
    return (u64)seq + 1;
}
/* The oldest command waiting, or 0 when none is known (none, or the ring overflowed). */
static struct entry *front(struct conn *c) { return c->len && !c->overflow ? &c->ring[c->head] : 0; }
static int front_is(struct conn *c, u16 what) {
    struct entry *e = front(c);
    return e && e->what == what;
}
static void pop(struct conn *c) {
    if (c->len) {
        c->head = (c->head + 1) % RING;
        c->len--;
    }
}

/* Words of a line (spaces separate them; the line ends at CR or LF). */
struct words {
    const u8 *p, *end;
};
static int next_word(struct words *w, const u8 **s, u32 *n) {
    while (w->p < w->end && *w->p == ' ') w->p++;
    if (w->p >= w->end || *w->p == '\r' || *w->p == '\n') return 0;
    *s = w->p;
    while (w->p < w->end && *w->p != ' ' && *w->p != '\r' && *w->p != '\n') w->p++;
    *n = (u32)(w->p - *s);
    return 1;
}
static int eq(const u8 *s, u32 n, const char *lit) {
    u32 i = 0;
    for (; lit[i]; i++)
        if (i >= n || s[i] != (u8)lit[i]) return 0;
    return i == n;
}
/* A decimal number, or -1. */
static i64 number(const u8 *s, u32 n) {
    if (n == 0 || n > 19) return -1;
    i64 v = 0;
    for (u32 i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}
static int is_command_word(const u8 *s, u32 n) {
    if (n == 0 || n > MAX_NAME) return 0;
    for (u32 i = 0; i < n; i++) {
        u8 c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}
static int is_storage(const u8 *s, u32 n) {
    return eq(s, n, "set") || eq(s, n, "add") || eq(s, n, "replace") || eq(s, n, "append") ||
           eq(s, n, "prepend") || eq(s, n, "cas");
}
static int is_upper_word(const u8 *s, u32 n) {
    if (n == 0) return 0;
    for (u32 i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_')) return 0;
    return 1;
}

/* ebtop_frame: a line first; then, given the line, the data block after it. */
__attribute__((export_name("ebtop_frame"))) i64 ebtop_frame(int len) {
    const u8 *in = buf + HEADER;
    if (!(buf[4] & 2)) {
        /* The first byte: text (a binary message starts 0x80/0x81: not this plugin's). */
        if (in[0] >= 0x80 || in[0] == '\r' || in[0] == '\n' || in[0] == ' ') return -1;
        return FRAME_LINE | 65536;
    }
    struct words w = {in, in + len};
    const u8 *s;
    u32 n;
    if (!next_word(&w, &s, &n)) return -1;
    if (is_storage(s, n)) {
        /* set key flags exptime bytes [cas] [noreply]: the 5th word is the block's length. */
        const u8 *a;
        u32 an;
        for (int i = 0; i < 4; i++)
            if (!next_word(&w, &a, &an)) return 0; /* too short: memcached answers an error */
        i64 bytes = number(a, an);
        return bytes < 0 ? 0 : bytes + 2;
    }
    if (eq(s, n, "VALUE")) {
        /* VALUE key flags bytes [cas] */
        const u8 *a;
        u32 an;
        for (int i = 0; i < 3; i++)
            if (!next_word(&w, &a, &an)) return -1;
        i64 bytes = number(a, an);
        return bytes < 0 ? -1 : bytes + 2;
    }
    return 0;
}

/* The answer's fixed part and strings, at the buffer's start. */
static u8 *ans;
static u32 ans_len;
static void answer_start(u8 kind, u8 outcome) {
    ans = buf;
    zero(ans, 24);
    ans[0] = kind;
    ans[1] = outcome;
    ans_len = 24;
}
static void set_key(u64 k) {
    for (int i = 0; i < 8; i++) ans[8 + i] = (u8)(k >> (8 * i));
}
/* Copied forwards: a string of the input (at HEADER and after) always lies past the part of
 * the answer written before it. */
static void put(const u8 *s, u32 n) {
    memcpy_(ans + ans_len, s, n);
    ans_len += n;
}
static void attr(const char *key, const u8 *v, u32 vn) {
    u32 kn = 0;
    while (key[kn]) kn++;
    ans[2]++;
    ans[ans_len] = (u8)kn;
    ans[ans_len + 1] = 0;
    ans[ans_len + 2] = (u8)vn;
    ans[ans_len + 3] = (u8)(vn >> 8);
    ans_len += 4;
    put((const u8 *)key, kn);
    put(v, vn);
}
static u32 decimal(u32 v, u8 *out) {
    u8 t[10];
    u32 n = 0;
    do {
        t[n++] = (u8)('0' + v % 10);
        v /= 10;
    } while (v);
    for (u32 i = 0; i < n; i++) out[i] = t[n - 1 - i];
    return n;
}

/* A command: its method (lower case), first key, and what reply it waits for. */
static int command(struct conn *c, const u8 *line, u32 len) {
    struct words w = {line, line + len};
    const u8 *s, *a, *last = 0;
    u32 n, an, lastn = 0;
    if (!next_word(&w, &s, &n) || !is_command_word(s, n)) return -1;
    int get = eq(s, n, "get") || eq(s, n, "gets");
    int gat = eq(s, n, "gat") || eq(s, n, "gats");
    int keyed = is_storage(s, n) || eq(s, n, "delete") || eq(s, n, "incr") || eq(s, n, "decr") ||
                eq(s, n, "touch");
    const u8 *key = 0;
    u32 keyn = 0, args = 0;
    while (next_word(&w, &a, &an)) {
        args++;
        if ((args == 1 && (get || keyed)) || (args == 2 && gat)) {
            key = a;
            keyn = an > MAX_KEY ? MAX_KEY : an;
        }
        last = a;
        lastn = an;
    }
    if (eq(s, n, "quit")) return 0; /* no reply: no call */
    u32 keys = get ? args : gat && args ? args - 1 : 0;
    int noreply = !(get || gat) && last && eq(last, lastn, "noreply");
    if (noreply) {
        /* No reply unless it fails: no call (the plugin cannot pair a silence). */
        push(c, ENTRY_NOREPLY);
        return 0;
    }
    u64 key_ = push(c, get || gat ? (u16)(keys > 0xfff0 ? 0xfff0 : keys) : ENTRY_PLAIN);
    u8 method[MAX_NAME];
    for (u32 i = 0; i < n; i++) method[i] = (s[i] >= 'A' && s[i] <= 'Z') ? s[i] + 32 : s[i];
    answer_start(KIND_REQUEST, 255);
    set_key(key_);
    ans[16] = (u8)n;
    ans[18] = (u8)keyn;
    put(method, n);
    if (key) put(key, keyn);
    if (keys > 1) {
        u8 d[10];
        attr("keys", d, decimal(keys, d));
    }
    return (int)ans_len;
}

/* A reply line (and its block). */
static int reply(struct conn *c, const u8 *line, u32 len) {
    struct words w = {line, line + len};
    const u8 *s;
    u32 n;
    if (!next_word(&w, &s, &n)) return -1;
    if (eq(s, n, "VALUE")) {
        c->hits++;
        answer_start(KIND_PART, 255);
        return 24;
    }
    int is_number = number(s, n) >= 0;
    if (!is_number && !is_upper_word(s, n)) return -1;
    int client_error = eq(s, n, "CLIENT_ERROR");
    int error = client_error || eq(s, n, "SERVER_ERROR") || eq(s, n, "ERROR");
    /* The commands before it that were sent noreply and did not fail got no reply. */
    while (front_is(c, ENTRY_NOREPLY) && !error) pop(c);
    if (error && front_is(c, ENTRY_NOREPLY)) {
        /* A noreply command's error, or the error of the answered command after it: no call
         * for either (see the top). */
        while (front_is(c, ENTRY_NOREPLY)) pop(c);
        pop(c);
        c->hits = 0;
        return -1;
    }
    struct entry *e = front(c);
    if (!e) {
        /* Whose reply is unknown (its command not seen, or the ring overflowed): no call. */
        pop(c);
        c->hits = 0;
        return -1;
    }
    u32 seq = e->seq;
    int asked = e->what;
    pop(c);
    u32 hits = c->hits;
    c->hits = 0;
    answer_start(KIND_RESPONSE, error ? (client_error ? OUT_CLIENT_ERROR : OUT_SERVER_ERROR) : OUT_OK);
    set_key((u64)seq + 1);
    if (error) {
        ans[20] = (u8)n;
        put(s, n);
    }
    /* The reply word first, then the rest of the answer's attributes. */
    /* As the built-in parser names it: a reply's first word (VALUE for a get's hits). */
    static const u8 number_word[] = "number", value_word[] = "VALUE";
    if (is_number)
        attr("reply", number_word, 6);
    else if (hits)
        attr("reply", value_word, 5);
    else
        attr("reply", s, n > MAX_NAME ? MAX_NAME : n);
    if (!error && asked < ENTRY_PLAIN) {
        u8 d[10];
        u32 h = hits < (u32)asked ? hits : (u32)asked;
        attr("hits", d, decimal(h, d));
        attr("misses", d, decimal((u32)asked - h, d));
    }
    if (error) {
        /* The message after the word, up to the line's end (at most 256 bytes). */
        const u8 *m = w.p;
        while (m < line + len && *m == ' ') m++;
        const u8 *e = m;
        while (e < line + len && *e != '\r' && *e != '\n') e++;
        u32 mn = (u32)(e - m);
        if (mn > 256) mn = 256;
        if (mn) attr("error", m, mn);
    }
    return (int)ans_len;
}

/* ebtop_message: a command (lower-case word) is a request; a reply (upper-case word or a
 * number) a response, a VALUE a part of one. */
__attribute__((export_name("ebtop_message"))) int ebtop_message(int len) {
    /* Answers are written at the buffer's start, their strings copied forwards from the
     * input after it: each copy's source lies past what the answer has reached. */
    u8 *in = buf + HEADER;
    u32 n = (u32)len;
    u32 line = 0;
    while (line < n && in[line] != '\n') line++;
    struct conn *c = conn_of(rd64(buf + 8));
    u8 first = in[0];
    if (first >= 'a' && first <= 'z') return command(c, in, line);
    return reply(c, in, line);
}
