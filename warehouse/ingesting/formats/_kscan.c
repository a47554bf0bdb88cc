/* _kscan: the fast path of Kineto event chunks (warehouse.ingesting.formats.kineto_scan).
 *
 * scan(chunk, max_name) reads a JSON array of trace events (the same bytes the strict msgspec
 * decoder of kineto_columns gets) in one pass, validating the whole of it as strict JSON
 * (RFC 8259: grammar, string escapes, UTF-8, no duplicate key in any object), and returns per
 * event the few fields the raw.trace_events rows are made of, as packed arrays: no Python
 * object per event. It returns None for anything outside the plain case it handles exactly
 * (a syntax error, an escaped key, an escaped pid/tid/device/stream string, a surrogate
 * escape, a type msgspec would refuse, a duplicate key, an object of over 64 keys, nesting
 * deeper than 64, ...): the caller then takes the msgspec path, which either decodes the
 * chunk or raises the located error. So this file never decides that a chunk is bad, only
 * that it is plainly good.
 *
 * The last item of its tuple is the number of object keys in the chunk (every object, every
 * depth), for the whole-document duplicate-key count (kineto.parse).
 *
 * gather(chunk, offsets, lengths) joins byte slices of the chunk (length -1: none) into one
 * buffer plus Arrow int32 offsets: a string column straight from the chunk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_kscan_json.h"

/* ------------------------------------------------------------------ interned names */

/* The distinct values of one field (ph, cat or name) in order of first appearance; a code per
 * event. Plain C (the GIL is released while scanning): the Python strings are made after. */
typedef struct {
    int32_t *slot;     /* code + 1, 0: empty */
    Py_ssize_t cap;    /* slots, and room for as many values */
    Slice *keys;       /* by code; len -1: null (or absent) */
    uint8_t *esc;      /* by code: the string has escapes (its text is made by unescape()) */
    int32_t n;         /* values so far */
    int32_t null_code; /* -1 until null/absent is seen */
} Intern;

static int intern_init(Intern *t)
{
    t->cap = 64;
    t->n = 0;
    t->null_code = -1;
    t->slot = PyMem_RawCalloc((size_t)t->cap, sizeof(int32_t));
    t->keys = PyMem_RawMalloc(sizeof(Slice) * (size_t)t->cap);
    t->esc = PyMem_RawMalloc((size_t)t->cap);
    return (t->slot && t->keys && t->esc) ? 0 : -1;
}

static void intern_free(Intern *t)
{
    PyMem_RawFree(t->slot);
    PyMem_RawFree(t->keys);
    PyMem_RawFree(t->esc);
}

static inline uint64_t hash(cp s, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}

/* Keep the table under half full (room for the next value too). */
static int intern_room(Intern *t, cp base)
{
    if ((Py_ssize_t)(t->n + 1) * 2 <= t->cap) return 0;
    Py_ssize_t cap = t->cap * 2;
    int32_t *slot = PyMem_RawCalloc((size_t)cap, sizeof(int32_t));
    Slice *keys = PyMem_RawRealloc(t->keys, sizeof(Slice) * (size_t)cap);
    if (keys) t->keys = keys;
    uint8_t *esc = PyMem_RawRealloc(t->esc, (size_t)cap);
    if (esc) t->esc = esc;
    if (!slot || !keys || !esc) {
        PyMem_RawFree(slot);
        return -1;
    }
    for (int32_t k = 0; k < t->n; k++) {
        if (keys[k].len < 0) continue;
        Py_ssize_t j = (Py_ssize_t)(hash(base + keys[k].off, keys[k].len) & (uint64_t)(cap - 1));
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = k + 1;
    }
    PyMem_RawFree(t->slot);
    t->slot = slot;
    t->cap = cap;
    return 0;
}

/* The code of a string's content (s, n) (n < 0: null; esc: it has escapes, a property of the
 * content, so equal contents share a code; two spellings of one text get two codes, which
 * the columns built from the texts do not see); -1: out of memory. */
static int32_t intern(Intern *t, cp base, cp s, Py_ssize_t n, int esc)
{
    if (n < 0 && t->null_code >= 0) return t->null_code;
    Py_ssize_t mask = t->cap - 1, i = 0;
    if (n >= 0) {
        i = (Py_ssize_t)(hash(s, n) & (uint64_t)mask);
        while (t->slot[i]) {
            Slice k = t->keys[t->slot[i] - 1];
            if (k.len == n && memcmp(base + k.off, s, (size_t)n) == 0) return t->slot[i] - 1;
            i = (i + 1) & mask;
        }
    }
    int32_t code = t->n++;
    t->esc[code] = (uint8_t)esc;
    if (n < 0) {
        t->keys[code].off = 0;
        t->keys[code].len = -1;
        t->null_code = code;
    } else {
        t->keys[code].off = (int32_t)(s - base);
        t->keys[code].len = (int32_t)n;
        t->slot[i] = code + 1;
    }
    return intern_room(t, base) ? -1 : code;
}

/* The text of value k: a new str, or NULL with the error set. */
static PyObject *intern_text(Intern *t, cp base, int32_t k)
{
    const char *s = (const char *)base + t->keys[k].off;
    Py_ssize_t n = t->keys[k].len;
    if (!t->esc[k]) return PyUnicode_DecodeUTF8(s, n, "strict");
    char *text = PyMem_Malloc((size_t)n + 1);
    if (!text) return PyErr_NoMemory();
    PyObject *v = PyUnicode_DecodeUTF8(text, unescape((cp)s, n, text), "strict");
    PyMem_Free(text);
    return v;
}

/* The values as a list: str, or None for null/absent. */
static PyObject *intern_list(Intern *t, cp base)
{
    PyObject *out = PyList_New(t->n);
    if (!out) return NULL;
    for (int32_t k = 0; k < t->n; k++) {
        PyObject *v = t->keys[k].len < 0 ? Py_NewRef(Py_None) : intern_text(t, base, k);
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, v);
    }
    return out;
}

/* ------------------------------------------------------------------ exact times */

/* A decimal number of microseconds as integer ns: -?digits(.d{0,3})?, within BIGINT. */
static int dec_ns(cp s, Py_ssize_t n, int negative_ok, int64_t *out)
{
    Py_ssize_t i = 0;
    int neg = 0, frac = 0;
    uint64_t v = 0;
    if (n > 0 && s[0] == '-') {
        if (!negative_ok) return -1;
        neg = 1;
        i = 1;
    }
    if (i >= n || !DIGIT(s[i])) return -1;
    for (; i < n && DIGIT(s[i]); i++)
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
            return -1;
    if (i < n && s[i] == '.') {
        for (i++; i < n && DIGIT(s[i]); i++) {
            if (++frac > 3) return -1;
            if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
                return -1;
        }
    }
    if (i != n) return -1; /* an exponent: the exact path */
    for (; frac < 3; frac++)
        if (__builtin_mul_overflow(v, 10, &v)) return -1;
    if (v > (uint64_t)INT64_MAX) return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* An integer within BIGINT (correlation), else not. */
static int bigint(cp s, Py_ssize_t n, int64_t *out)
{
    Py_ssize_t i = 0;
    int neg = 0;
    uint64_t v = 0;
    if (n > 0 && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= n) return -1;
    for (; i < n; i++) {
        if (!DIGIT(s[i])) return -1;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
            return -1;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* ------------------------------------------------------------------ events */

enum { TS_OK = 1, DUR_OK = 2, CORR_OK = 4 };

typedef struct {
    Py_ssize_t n, cap;
    int32_t *ph, *cat, *name;
    int64_t *ts, *dur, *corr;
    uint8_t *flags;
    Slice *pid, *tid, *args, *dev, *stm;
} Out;

static int out_grow(Out *o)
{
    Py_ssize_t cap = o->cap ? o->cap * 2 : 1024;
#define GROW(f)                                                          \
    do {                                                                 \
        void *q = PyMem_RawRealloc(o->f, sizeof(*o->f) * (size_t)cap);  \
        if (!q) return -1;                                               \
        o->f = q;                                                        \
    } while (0)
    GROW(ph); GROW(cat); GROW(name); GROW(ts); GROW(dur); GROW(corr); GROW(flags);
    GROW(pid); GROW(tid); GROW(args); GROW(dev); GROW(stm);
#undef GROW
    o->cap = cap;
    return 0;
}

static void out_free(Out *o)
{
    PyMem_RawFree(o->ph); PyMem_RawFree(o->cat); PyMem_RawFree(o->name);
    PyMem_RawFree(o->ts); PyMem_RawFree(o->dur); PyMem_RawFree(o->corr);
    PyMem_RawFree(o->flags); PyMem_RawFree(o->pid); PyMem_RawFree(o->tid);
    PyMem_RawFree(o->args); PyMem_RawFree(o->dev); PyMem_RawFree(o->stm);
}

#define IS(s, n, lit) ((n) == (Py_ssize_t)sizeof(lit) - 1 && memcmp((s), lit, sizeof(lit) - 1) == 0)

/* args: an object whose device, stream and correlation are read; anything else verbatim. */
typedef struct {
    Out *o;
    Py_ssize_t k;
} ArgsCtx;

static int args_member(Cur *c, cp s, Py_ssize_t n, void *ctx, int depth)
{
    Out *o = ((ArgsCtx *)ctx)->o;
    Py_ssize_t k = ((ArgsCtx *)ctx)->k;
    if (IS(s, n, "device")) return scalar(c, depth, &o->dev[k]);
    if (IS(s, n, "stream")) return scalar(c, depth, &o->stm[k]);
    if (IS(s, n, "correlation")) {
        Slice v;
        if (raw(c, depth, &v)) return -1;
        if (bigint(c->base + v.off, v.len, &o->corr[k]) == 0) o->flags[k] |= CORR_OK;
        return 0;
    }
    return value(c, depth);
}

static int args_value(Cur *c, Out *o, Py_ssize_t k, int depth)
{
    cp start = c->p;
    if (c->p >= c->end) return -1;
    if (*c->p != '{') return raw(c, depth, &o->args[k]);
    ArgsCtx ctx = {o, k};
    if (members(c, depth, args_member, &ctx)) return -1;
    o->args[k].off = (int32_t)(start - c->base);
    o->args[k].len = (int32_t)(c->p - start);
    return 0;
}

/* ph, cat, name: a string of at most max_name bytes as written, or null. */
static int name_value(Cur *c, Intern *t, int32_t *code)
{
    if (c->p < c->end && *c->p == 'n') {
        if (lit(c, "null", 4)) return -1;
        *code = intern(t, c->base, NULL, -1, 0);
        return *code < 0 ? -2 : 0; /* -2: out of memory */
    }
    if (c->p >= c->end || *c->p != '"') return -1; /* msgspec refuses other types */
    cp s;
    Py_ssize_t n;
    int esc;
    /* the limit is msgspec's, in characters: never more of them than bytes written */
    if (str(c, &s, &n, &esc) || n > c->max_name) return -1;
    *code = intern(t, c->base, s, n, esc);
    return *code < 0 ? -2 : 0;
}

typedef struct {
    Out *o;
    Py_ssize_t k;
    Intern *t[3]; /* ph, cat, name */
    int32_t codes[3];
    Slice ts, dur;
} EventCtx;

static int event_member(Cur *c, cp s, Py_ssize_t n, void *ctx, int depth)
{
    EventCtx *e = ctx;
    Out *o = e->o;
    Py_ssize_t k = e->k;
    if (IS(s, n, "ph")) return name_value(c, e->t[0], &e->codes[0]);
    if (IS(s, n, "cat")) return name_value(c, e->t[1], &e->codes[1]);
    if (IS(s, n, "name")) return name_value(c, e->t[2], &e->codes[2]);
    if (IS(s, n, "ts")) return raw(c, depth, &e->ts);
    if (IS(s, n, "dur")) return raw(c, depth, &e->dur);
    if (IS(s, n, "pid")) return scalar(c, depth, &o->pid[k]);
    if (IS(s, n, "tid")) return scalar(c, depth, &o->tid[k]);
    if (IS(s, n, "args")) return args_value(c, o, k, depth);
    return value(c, depth);
}

/* One event object at c->p. Returns 0, -1 (not the plain case) or -2 (out of memory). */
static int event(Cur *c, Out *o, Intern *ph, Intern *cat, Intern *nm)
{
    Py_ssize_t k = o->n;
    Slice none = {0, -1};
    EventCtx e = {o, k, {ph, cat, nm}, {-1, -1, -1}, none, none};
    o->flags[k] = 0;
    o->pid[k] = o->tid[k] = o->args[k] = o->dev[k] = o->stm[k] = none;
    o->corr[k] = 0;
    if (c->p >= c->end || *c->p != '{') return -1; /* msgspec: an event is an object */
    int r = members(c, 1, event_member, &e);
    if (r) return r;
    for (int f = 0; f < 3; f++) {
        if (e.codes[f] < 0) {
            e.codes[f] = intern(e.t[f], c->base, NULL, -1, 0);
            if (e.codes[f] < 0) return -2;
        }
    }
    o->ph[k] = e.codes[0];
    o->cat[k] = e.codes[1];
    o->name[k] = e.codes[2];
    if (e.ts.len > 0 && dec_ns(c->base + e.ts.off, e.ts.len, 1, &o->ts[k]) == 0)
        o->flags[k] |= TS_OK;
    if (e.dur.len > 0 && dec_ns(c->base + e.dur.off, e.dur.len, 0, &o->dur[k]) == 0)
        o->flags[k] |= DUR_OK;
    o->n++;
    return 0;
}

static PyObject *packed(const void *data, Py_ssize_t n, size_t size)
{
    return PyBytes_FromStringAndSize((const char *)data, n * (Py_ssize_t)size);
}

/* The events of the chunk into o: 0, -1 (not the plain case) or -2 (out of memory). No
 * Python object is touched: called with the GIL released. */
static int scan_events(Cur *c, Out *o, Intern *ph, Intern *cat, Intern *nm)
{
    ws(c);
    if (c->p >= c->end || *c->p != '[') return -1;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            if (o->n == o->cap && out_grow(o)) return -2;
            int r = event(c, o, ph, cat, nm);
            if (r) return r;
            r = next(c, ']');
            if (r < 0) return -1;
            if (r) break;
        }
    }
    ws(c);
    return c->p == c->end ? 0 : -1;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t max_name;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &max_name)) return NULL;
    PyObject *result = NULL;
    Out o = {0};
    Intern ph = {0}, cat = {0}, nm = {0};
    Cur c = {buf.buf, buf.buf, (cp)buf.buf + buf.len, max_name, 0};
    int r = -1;
    if (buf.len < INT32_MAX) {
        if (intern_init(&ph) || intern_init(&cat) || intern_init(&nm)) {
            r = -2;
        } else {
            Py_BEGIN_ALLOW_THREADS
            r = scan_events(&c, &o, &ph, &cat, &nm);
            Py_END_ALLOW_THREADS
        }
    }
    if (r == -2) {
        PyErr_NoMemory();
    } else if (r) {
        result = Py_NewRef(Py_None);
    } else {
        Py_ssize_t n = o.n;
        cp base = buf.buf;
        result = Py_BuildValue(
            "(nNNNNNNNNNNNNNNNn)", n,
            packed(o.ph, n, 4), intern_list(&ph, base), packed(o.cat, n, 4),
            intern_list(&cat, base), packed(o.name, n, 4), intern_list(&nm, base),
            packed(o.ts, n, 8), packed(o.dur, n, 8), packed(o.flags, n, 1),
            packed(o.corr, n, 8), packed(o.pid, n, 8), packed(o.tid, n, 8),
            packed(o.args, n, 8), packed(o.dev, n, 8), packed(o.stm, n, 8), c.keys);
    }
    out_free(&o);
    intern_free(&ph);
    intern_free(&cat);
    intern_free(&nm);
    PyBuffer_Release(&buf);
    return result;
}

/* gather(chunk, slices): the bytes of the slices (int32 offset, int32 length; -1: none)
 * joined, and the Arrow int32 offsets of each (n + 1 of them). */
static PyObject *gather(PyObject *self, PyObject *args)
{
    Py_buffer chunk, sl;
    if (!PyArg_ParseTuple(args, "y*y*", &chunk, &sl)) return NULL;
    PyObject *data = NULL, *offs = NULL;
    Py_ssize_t n = sl.len / (Py_ssize_t)sizeof(Slice);
    const Slice *s = sl.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i].len > 0) {
            if (s[i].off < 0 || (Py_ssize_t)s[i].off + s[i].len > chunk.len) {
                PyErr_SetString(PyExc_ValueError, "a slice outside the chunk");
                goto out;
            }
            total += s[i].len;
        }
    }
    if (total >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "string column over 2 GiB in one batch");
        goto out;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    offs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    if (!data || !offs) goto out;
    {
        char *d = PyBytes_AS_STRING(data);
        int32_t *of = (int32_t *)PyBytes_AS_STRING(offs);
        int32_t at = 0;
        of[0] = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (s[i].len > 0) {
                memcpy(d + at, (const char *)chunk.buf + s[i].off, (size_t)s[i].len);
                at += s[i].len;
            }
            of[i + 1] = at;
        }
    }
out:
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&sl);
    if (PyErr_Occurred()) {
        Py_XDECREF(data);
        Py_XDECREF(offs);
        return NULL;
    }
    return Py_BuildValue("(NN)", data, offs);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(chunk, max_name) -> the events' fields as packed arrays, or None (not the plain "
     "case: take the exact path)"},
    {"gather", gather, METH_VARARGS,
     "gather(chunk, slices) -> (the slices' bytes joined, their int32 Arrow offsets)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kscan",
                                    "The compiled fast path of Kineto event chunks.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kscan(void) { return PyModule_Create(&module); }
