/* Strict JSON for _kscan.c: a cursor over a byte buffer and the functions that read one value
 * of RFC 8259 JSON (grammar, string escapes, UTF-8, no repeated key in an object), returning
 * -1 for anything they do not accept (the caller then declines the chunk). Plain C: no
 * Python object is touched (the GIL is released while they run). Included by _kscan.c only.
 */
#ifndef KSCAN_JSON_H
#define KSCAN_JSON_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef const unsigned char *cp;

enum { MAX_DEPTH = 64, MAX_KEYS = 64 };

typedef struct {
    cp base, p, end;
    Py_ssize_t max_name;
    Py_ssize_t keys; /* object keys read, in every object at every depth */
} Cur;

typedef struct {
    int32_t off, len; /* len -1: absent or null */
} Slice;

/* ------------------------------------------------------------------ strict JSON */

static inline void ws(Cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
        c->p++;
}

static inline int hexval(unsigned char h)
{
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
}

/* A string at c->p (a quote). Its content in *s, *n; *esc: it holds a backslash. */
static int str(Cur *c, cp *s, Py_ssize_t *n, int *esc)
{
    cp p = c->p + 1, end = c->end;
    int e = 0;
    *s = p;
    for (;;) {
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p >= end) return -1;
        unsigned char b = *p;
        if (b == '"') break;
        if (b < 0x20) return -1;
        if (b == '\\') {
            e = 1;
            if (p + 1 >= end) return -1;
            unsigned char x = p[1];
            if (x == 'u') {
                if (end - p < 6) return -1;
                unsigned v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(p[k]);
                    if (h < 0) return -1;
                    v = v * 16 + (unsigned)h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return -1; /* surrogates: the exact path */
                p += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' ||
                       x == 'r' || x == 't') {
                p += 2;
            } else {
                return -1;
            }
            continue;
        }
        /* UTF-8: no overlong form, no surrogate, nothing above U+10FFFF */
        if (b < 0xC2) return -1;
        if (b < 0xE0) {
            if (end - p < 2 || (p[1] & 0xC0) != 0x80) return -1;
            p += 2;
        } else if (b < 0xF0) {
            if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return -1;
            if ((b == 0xE0 && p[1] < 0xA0) || (b == 0xED && p[1] >= 0xA0)) return -1;
            p += 3;
        } else if (b < 0xF5) {
            if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
                (p[3] & 0xC0) != 0x80)
                return -1;
            if ((b == 0xF0 && p[1] < 0x90) || (b == 0xF4 && p[1] >= 0x90)) return -1;
            p += 4;
        } else {
            return -1;
        }
    }
    *n = p - *s;
    *esc = e;
    c->p = p + 1;
    return 0;
}

/* The text of a string's content (s, n) that str() accepted (its escapes valid, no surrogate
 * escape) into out, which has room for n bytes (the text is never longer); its length. */
static Py_ssize_t unescape(cp s, Py_ssize_t n, char *out)
{
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n;) {
        unsigned char b = s[i];
        if (b != '\\') {
            out[o++] = (char)b;
            i++;
            continue;
        }
        unsigned char x = s[i + 1];
        if (x == 'u') {
            unsigned v = 0;
            for (int k = 2; k < 6; k++) v = v * 16 + (unsigned)hexval(s[i + k]);
            if (v < 0x80) {
                out[o++] = (char)v;
            } else if (v < 0x800) {
                out[o++] = (char)(0xC0 | (v >> 6));
                out[o++] = (char)(0x80 | (v & 0x3F));
            } else {
                out[o++] = (char)(0xE0 | (v >> 12));
                out[o++] = (char)(0x80 | ((v >> 6) & 0x3F));
                out[o++] = (char)(0x80 | (v & 0x3F));
            }
            i += 6;
            continue;
        }
        out[o++] = x == 'b' ? '\b' : x == 'f' ? '\f' : x == 'n' ? '\n' : x == 'r' ? '\r'
                 : x == 't' ? '\t' : (char)x; /* \" \\ \/ stand for themselves */
        i += 2;
    }
    return o;
}

#define DIGIT(x) ((x) >= '0' && (x) <= '9')

static int num(Cur *c)
{
    cp p = c->p, end = c->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && DIGIT(*p)) p++;
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !DIGIT(*p)) return -1;
        while (p < end && DIGIT(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !DIGIT(*p)) return -1;
        while (p < end && DIGIT(*p)) p++;
    }
    c->p = p;
    return 0;
}

static int lit(Cur *c, const char *word, Py_ssize_t n)
{
    if (c->end - c->p < n || memcmp(c->p, word, (size_t)n) != 0) return -1;
    c->p += n;
    return 0;
}

static int value(Cur *c, int depth);

/* One key of an object (c->p at its quote), checked against the keys before it. */
static int key(Cur *c, cp *ks, Py_ssize_t *kn, int *nk, cp *s, Py_ssize_t *n)
{
    int esc;
    if (c->p >= c->end || *c->p != '"') return -1;
    if (str(c, s, n, &esc) || esc || *nk == MAX_KEYS) return -1;
    for (int k = 0; k < *nk; k++)
        if (kn[k] == *n && memcmp(ks[k], *s, (size_t)*n) == 0) return -1;
    ks[*nk] = *s;
    kn[(*nk)++] = *n;
    c->keys++;
    ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    ws(c);
    return 0;
}

/* After a member or element: 1 at the closing byte (consumed), 0 after a comma, -1 else. */
static inline int next(Cur *c, unsigned char close)
{
    ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        ws(c);
        return 0;
    }
    if (*c->p == close) {
        c->p++;
        return 1;
    }
    return -1;
}

/* Reads the value of the member whose key is (s, n), at c->p; returns 0, or what the
 * caller of members() gets back. */
typedef int (*member_fn)(Cur *c, cp s, Py_ssize_t n, void *ctx, int depth);

/* The object at c->p (a '{'): every key checked against those before it, each value read by
 * member (NULL: any value). 0, -1, or a member's own non-zero result. */
static int members(Cur *c, int depth, member_fn member, void *ctx)
{
    cp ks[MAX_KEYS];
    Py_ssize_t kn[MAX_KEYS];
    int nk = 0;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        cp s;
        Py_ssize_t n;
        if (key(c, ks, kn, &nk, &s, &n)) return -1;
        int r = member ? member(c, s, n, ctx, depth + 1) : value(c, depth + 1);
        if (r) return r;
        r = next(c, '}');
        if (r) return r < 0 ? -1 : 0;
    }
}

static int object(Cur *c, int depth) { return members(c, depth, NULL, NULL); }

static int array(Cur *c, int depth)
{
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 0;
    }
    for (;;) {
        if (value(c, depth + 1)) return -1;
        int r = next(c, ']');
        if (r) return r < 0 ? -1 : 0;
    }
}

static int value(Cur *c, int depth)
{
    if (depth > MAX_DEPTH || c->p >= c->end) return -1;
    switch (*c->p) {
    case '{':
        return object(c, depth);
    case '[':
        return array(c, depth);
    case '"': {
        cp s;
        Py_ssize_t n;
        int e;
        return str(c, &s, &n, &e);
    }
    case 't':
        return lit(c, "true", 4);
    case 'f':
        return lit(c, "false", 5);
    case 'n':
        return lit(c, "null", 4);
    default:
        return num(c);
    }
}

/* A value kept verbatim (args, ts, dur, correlation). */
static int raw(Cur *c, int depth, Slice *out)
{
    cp start = c->p;
    if (value(c, depth)) return -1;
    out->off = (int32_t)(start - c->base);
    out->len = (int32_t)(c->p - start);
    return 0;
}

/* pid, tid, device, stream: a string's unescaped content, null (and "") as absent, else
 * verbatim. */
static int scalar(Cur *c, int depth, Slice *out)
{
    if (c->p < c->end && *c->p == '"') {
        cp s;
        Py_ssize_t n;
        int esc;
        if (str(c, &s, &n, &esc) || esc) return -1;
        out->off = (int32_t)(s - c->base);
        out->len = n ? (int32_t)n : -1; /* "" is null, as in kineto_columns._scalars */
        return 0;
    }
    if (c->p < c->end && *c->p == 'n') {
        out->len = -1;
        return lit(c, "null", 4);
    }
    return raw(c, depth, out);
}

#endif
