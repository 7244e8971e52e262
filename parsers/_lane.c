/* The compiled lane of the plain-file paths (`scan`, the daemon): line splitting and the literal pre-filter, in C.
 *
 * Most lines of a busy log are quiet: they hold none of the literals a parser looks for, so the parser
 * would only count them. Python pays for every such line anyway (a bytes object, a decode, a call and a
 * regular-expression search). `split` cuts a buffer into the lines a `BoundedLines` reader would give
 * (at each newline, or at `max_line` bytes for a longer line) and tells the quiet ones without making any
 * Python object for them: a run of quiet lines comes back as one (count, start, stop) tuple, every other
 * line as its own bytes object, in order. The callers (agent/offline/plain_lane.py for `scan`,
 * agent/daemon/lane.py for the daemon) hand the others to the parser unchanged, so the Python parser stays
 * the reference for everything it decides. `whole` tells the daemon's tailer which lines of a read it may
 * hand on as bytes (agent/sources/rawlines.py).
 *
 * A line is quiet only when all of these hold, so that `feed` would do nothing but count it:
 *   - it is ASCII without NUL, ESC or CR (no decoding, no cleaning up, the same text in bytes and in str);
 *   - it holds none of the literals (the parser's pre-filter and stats words, parsers/quiet.py);
 *   - no request's text can open on it (parsers/redact.py's `opens_request_text` is False): it holds no
 *     single quote or backslash, an even number of double quotes and at most `max_quiet` bytes, or else
 *     none of the guard words (one of which every request log holds: `is_request_log`);
 *   - it is at most MAX_QUIET_LINE bytes long (a longer line is cut before it is read);
 *   - it cannot wear a paste's or a shipper's wrapper (parsers/paste.py's `unpaste`: a JSON envelope, a quote,
 *     a bullet, a gutter, a CRI prefix, an indented record), whose inside `feed` would read instead: it may be
 *     a line held for its rest, or several lines (a JSON string's escaped newlines);
 *   - its length is not one a parser holds for its rest (a multiple of a terminal's width, `wraps`:
 *     parsers/paste.py's WRAP_WIDTHS, from the shortest on): `feed` might join the next line to it.
 * A stats line of such a length is not read here either. (Such lines are ASCII, so bytes are characters.)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_QUIET_LINE 65536  /* parsers/base.py's MAX_LINE_CHARS: a longer line is cut before it is read */
#define BAD 1u    /* a byte that makes a line not quiet on its own */
#define QUOTE 2u  /* a double quote: counted */
#define FIRST 4u  /* the first byte of a literal of two bytes or more */
#define RISKY 8u  /* a single quote or a backslash: a request's text might open here */
#define MAX_WRAPS 8  /* terminal widths a line may be cut at */

typedef struct {
    Py_ssize_t width[MAX_WRAPS];
    Py_ssize_t count;
    Py_ssize_t shortest;
} Wraps;

/* Whether a line of `n` characters is one `StreamParser.feed` holds for its rest: at least the shortest
 * width and a multiple of one of them. */
static int held(const Wraps *w, Py_ssize_t n) {
    if (w->count == 0 || n < w->shortest)
        return 0;
    for (Py_ssize_t i = 0; i < w->count; i++)
        if (n % w->width[i] == 0)
            return 1;
    return 0;
}

/* Read `wraps` (a tuple of positive ints). Returns 0, or -1 with an exception set. */
static int wraps_build(Wraps *w, PyObject *wraps) {
    w->count = PyTuple_GET_SIZE(wraps);
    w->shortest = 0;
    if (w->count > MAX_WRAPS) {
        PyErr_SetString(PyExc_ValueError, "too many wrap widths");
        return -1;
    }
    for (Py_ssize_t i = 0; i < w->count; i++) {
        Py_ssize_t width = PyLong_AsSsize_t(PyTuple_GET_ITEM(wraps, i));
        if (width == -1 && PyErr_Occurred())
            return -1;
        if (width <= 0) {
            PyErr_SetString(PyExc_ValueError, "wrap widths must be positive");
            return -1;
        }
        w->width[i] = width;
        if (w->shortest == 0 || width < w->shortest)
            w->shortest = width;
    }
    return 0;
}

typedef struct {
    unsigned char cls[256];
    unsigned char pairs[65536 / 8];    /* the first two bytes of each literal, as a bit set */
    unsigned char twos[65536 / 8];     /* the literals of two bytes, as a bit set */
    unsigned char threes[65536 / 8];   /* a hash of the first three bytes of each longer literal, as a bit set */
    int32_t pair_head[65536];          /* per first two bytes: the first literal (index), -1 for none */
    int32_t *next;                     /* the next literal with the same first two bytes */
    uint32_t *head4;                   /* each literal's first four bytes (a literal of three: its three) */
    const char **text;
    Py_ssize_t *len;
    Py_ssize_t count;
    PyObject *source;                  /* the tuple it was built from, held (its bytes are `text`) */
} Filter;

/* A 16-bit hash of three bytes: most positions where two bytes start a literal fail it. */
static inline unsigned hash3(const unsigned char *p) {
    return (((unsigned)p[0] << 8) ^ ((unsigned)p[1] << 4) ^ ((unsigned)p[2] * 2654435761u >> 16)) & 0xffffu;
}

/* The first four bytes at p (three when n is 3, the fourth zero), for one comparison before memcmp. */
static inline uint32_t head4(const unsigned char *p, Py_ssize_t n) {
    uint32_t v = 0;
    memcpy(&v, p, n >= 4 ? 4 : 3);
    return v;
}

/* The filter of the last literals asked for. A caller passes the same tuple call after call (parsers/quiet.py
 * keeps one per parser class), so it is built once, not once per block. */
static Filter cache;

static void filter_free(Filter *f) {
    PyMem_Free(f->next);
    PyMem_Free(f->head4);
    PyMem_Free(f->text);
    PyMem_Free(f->len);
    f->next = NULL;
    f->head4 = NULL;
    f->text = NULL;
    f->len = NULL;
    Py_CLEAR(f->source);
}

/* The filter of a tuple of bytes (the literals), built unless it is the cached one's. NULL with an exception
 * set on an error (the cache is then empty). */
static const Filter *filter_of(PyObject *literals) {
    Filter *f = &cache;
    if (f->source == literals)
        return f;
    filter_free(f);
    memset(f->cls, 0, sizeof f->cls);
    memset(f->pairs, 0, sizeof f->pairs);
    memset(f->twos, 0, sizeof f->twos);
    memset(f->threes, 0, sizeof f->threes);
    memset(f->pair_head, 0xff, sizeof f->pair_head);  /* -1 */
    for (int c = 0; c < 256; c++)
        if (c >= 0x80 || c == 0 || c == 0x1b || c == '\r')
            f->cls[c] = BAD;
    f->cls['"'] |= QUOTE;
    f->cls['\''] |= RISKY;
    f->cls['\\'] |= RISKY;
    f->count = PyTuple_GET_SIZE(literals);
    if (f->count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many literals");
        return NULL;
    }
    f->next = PyMem_New(int32_t, f->count ? f->count : 1);
    f->head4 = PyMem_New(uint32_t, f->count ? f->count : 1);
    f->text = PyMem_New(const char *, f->count ? f->count : 1);
    f->len = PyMem_New(Py_ssize_t, f->count ? f->count : 1);
    if (f->next == NULL || f->head4 == NULL || f->text == NULL || f->len == NULL) {
        filter_free(f);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < f->count; i++) {
        PyObject *item = PyTuple_GET_ITEM(literals, i);
        if (!PyBytes_Check(item)) {
            filter_free(f);
            PyErr_SetString(PyExc_TypeError, "literals must be bytes");
            return NULL;
        }
        const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t n = PyBytes_GET_SIZE(item);
        f->text[i] = (const char *)s;
        f->len[i] = n;
        f->next[i] = -1;
        if (n == 0) {  /* the empty literal is in every line: nothing is quiet */
            for (int c = 0; c < 256; c++)
                f->cls[c] |= BAD;
            continue;
        }
        if (n == 1) {
            f->cls[s[0]] |= BAD;
            continue;
        }
        unsigned pair = ((unsigned)s[0] << 8) | s[1];
        f->pairs[pair >> 3] |= (unsigned char)(1u << (pair & 7));
        f->cls[s[0]] |= FIRST;
        if (n == 2) {
            f->twos[pair >> 3] |= (unsigned char)(1u << (pair & 7));
            continue;
        }
        unsigned three = hash3(s);
        f->threes[three >> 3] |= (unsigned char)(1u << (three & 7));
        f->head4[i] = head4(s, n);
        f->next[i] = f->pair_head[pair];
        f->pair_head[pair] = (int32_t)i;
    }
    f->source = Py_NewRef(literals);
    return f;
}

/* Whether parsers/paste.py's `unpaste` might take a wrapper off the line [p, end): its first byte can start
 * one, and the cheap tests `unpaste` makes first do not rule it out (a time stamp `2025-…` does not wear one,
 * a line number `12 | ` does). Such a line is never quiet. */
static int maybe_pasted(const unsigned char *p, const unsigned char *end) {
    Py_ssize_t n = end - p;
    if (n == 0)
        return 0;
    unsigned char c = p[0];
    if (c >= '0' && c <= '9') {
        if (n > 10 && p[10] == 'T') {  /* a CRI prefix: `…T…Z stdout F ` */
            for (Py_ssize_t i = 19; i + 4 <= n && i + 4 <= 42; i++)
                if (memcmp(p + i, " std", 4) == 0)
                    return 1;
        }
        Py_ssize_t d = 0;  /* a gutter: `\d{1,6}(?:[ \t]{0,2}[|│]|: )` */
        while (d < n && d < 7 && p[d] >= '0' && p[d] <= '9')
            d++;
        if (d > 6)
            return 0;
        if (d + 1 < n && p[d] == ':' && p[d + 1] == ' ')
            return 1;
        Py_ssize_t i = d;
        while (i < n && i < d + 2 && (p[i] == ' ' || p[i] == '\t'))
            i++;
        return i < n && p[i] == '|';
    }
    if (c == ' ' || c == '\t') {  /* indented: a wrapper or a whole record after at most 8 blanks */
        Py_ssize_t i = 0;
        while (i < n && i < 8 && (p[i] == ' ' || p[i] == '\t'))
            i++;
        return i < n && p[i] != 0 && strchr("DIWECt[({>-*+|0123456789", p[i]) != NULL;
    }
    return c == '{' || c == '>' || c == '-' || c == '*' || c == '+' || c == '|';
}

/* Whether [p, end) may be an access line with Envoy's columns after its status (`" 200 - 0 612 3 2`): a
 * request's duration, which `feed` reads though the line holds none of its literals (parsers/http_access.py's
 * `carries_duration`, whose test this is, without its final pattern: a line it passes goes to the parser). */
static const unsigned char *find_bytes(const unsigned char *p, const unsigned char *end, const char *w, size_t n) {
    for (; end - p >= (Py_ssize_t)n; p++) {
        p = memchr(p, w[0], (size_t)(end - p) - n + 1);
        if (p == NULL)
            return NULL;
        if (memcmp(p, w, n) == 0)
            return p;
    }
    return NULL;
}

static int envoy_timed(const unsigned char *p, const unsigned char *end) {
    const unsigned char *i = find_bytes(p, end, " HTTP/", 6);
    const unsigned char *j = i == NULL ? NULL : find_bytes(i, end, "\" ", 2);
    if (j == NULL || end - j <= 6)
        return 0;
    const unsigned char *k = memchr(j + 6, ' ', (size_t)(end - (j + 6)));
    return k != NULL && k + 1 < end && k[1] >= '0' && k[1] <= '9';
}

/* Whether the text [p, end) is quiet (see the top of the file); `guards`: the words one of which a line
 * must hold to be read as a request's text. */
static int quiet(const Filter *f, const unsigned char *p, const unsigned char *end, PyObject *guards,
                 Py_ssize_t max_quiet) {
    unsigned quotes = 0;
    int risky = end - p > max_quiet;
    for (const unsigned char *q = p; q < end; q++) {
        unsigned t = f->cls[*q];
        if (t == 0)
            continue;
        if (t & BAD)
            return 0;
        if (t & QUOTE)
            quotes++;
        if (t & RISKY)
            risky = 1;
        if ((t & FIRST) && q + 1 < end) {
            unsigned pair = ((unsigned)q[0] << 8) | q[1];
            if (f->pairs[pair >> 3] & (1u << (pair & 7))) {
                if (f->twos[pair >> 3] & (1u << (pair & 7)))
                    return 0;  /* a literal of two bytes */
                unsigned three = end - q >= 3 ? hash3(q) : 0;
                /* only the literals that start with these two bytes, when one starts with these three:
                 * their first four bytes in one comparison, then the rest */
                if (end - q >= 3 && (f->threes[three >> 3] & (1u << (three & 7)))) {
                    uint32_t have4 = head4(q, end - q), have3 = head4(q, 3);
                    for (int32_t i = f->pair_head[pair]; i >= 0; i = f->next[i]) {
                        Py_ssize_t n = f->len[i];
                        if (end - q < n || (n >= 4 ? have4 : have3) != f->head4[i])
                            continue;
                        if (n <= 4 || memcmp(q + 4, f->text[i] + 4, (size_t)(n - 4)) == 0)
                            return 0;
                    }
                }
            }
        }
    }
    if (envoy_timed(p, end))
        return 0;
    if (!risky && (quotes & 1u) == 0)
        return 1;
    /* a quote, a backslash or a long line: quiet still, unless it holds a request word */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(guards); i++) {
        PyObject *word = PyTuple_GET_ITEM(guards, i);
        Py_ssize_t n = PyBytes_GET_SIZE(word);
        const char *w = PyBytes_AS_STRING(word);
        for (const unsigned char *q = p; n > 0 && end - q >= n; q++) {
            q = memchr(q, w[0], (size_t)(end - q - n + 1));
            if (q == NULL)
                break;
            if (memcmp(q, w, (size_t)n) == 0)
                return 0;
        }
    }
    return 1;
}

/* ---- vLLM's stats line in V1's plain shape ------------------------------------------------------
 * `(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:N] Engine 000: Avg prompt throughput: …`, or the same
 * without the process tag: vLLM's own prefix (parsers/vllm_stats.py's `own_prefix`), then the fields in
 * V1's order without a preemption count or a CPU cache (a shape `match` reads alike). Only what the bytes
 * decide is checked here; the parser's state (an open block or a held line, the minute's conversion, the
 * queue) is `VllmParser.settle_sample`'s to check. A line that fails any
 * test, or whose numbers Python's `int` and `float` might not take as they stand, goes to the parser. */

static const char STATS_WORD[] = "Avg prompt throughput: ";

static Py_ssize_t find(const char *s, Py_ssize_t n, Py_ssize_t from, const char *word) {
    Py_ssize_t w = (Py_ssize_t)strlen(word);
    if (from < 0)
        from = 0;
    for (Py_ssize_t i = from; i + w <= n; i++) {
        const char *hit = memchr(s + i, word[0], (size_t)(n - w - i + 1));
        if (hit == NULL)
            return -1;
        i = hit - s;
        if (memcmp(hit, word, (size_t)w) == 0)
            return i;
    }
    return -1;
}

static int py_space(unsigned char c) {  /* str.isspace for ASCII: what str.strip() removes */
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
}

static int literal(const char *s, Py_ssize_t n, Py_ssize_t *at, const char *word) {
    Py_ssize_t w = (Py_ssize_t)strlen(word);
    if (n - *at < w || memcmp(s + *at, word, (size_t)w) != 0)
        return 0;
    *at += w;
    return 1;
}

/* `\d+` (at most 18 digits: `int` takes them as they stand) at *at; its start and length, or 0. */
static int digits(const char *s, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *start, Py_ssize_t *len) {
    Py_ssize_t i = *at;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    if (i == *at || i - *at > 18)
        return 0;
    *start = *at;
    *len = i - *at;
    *at = i;
    return 1;
}

/* `[\d.]+` at *at; `plain` says whether `float` takes it as it stands (a digit, at most one dot, at most 40
 * characters). */
static int number_text(const char *s, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *start, Py_ssize_t *len,
                       int *plain) {
    Py_ssize_t i = *at;
    int dots = 0, nums = 0;
    while (i < n && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) {
        if (s[i] == '.')
            dots++;
        else
            nums++;
        i++;
    }
    if (i == *at)
        return 0;
    *plain = dots <= 1 && nums > 0 && i - *at <= 40;
    *start = *at;
    *len = i - *at;
    *at = i;
    return 1;
}

/* `[\d.]+` that `float` takes as it stands. */
static int number(const char *s, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *start, Py_ssize_t *len) {
    int plain = 0;
    return number_text(s, n, at, start, len, &plain) && plain;
}

/* `[\d.]+` as `float` reads it. With at most 15 digits, all of them (as one integer) and the power of ten the
 * dot stands for are exact doubles, and one division of exact doubles is correctly rounded: the same double
 * as strtod's (Clinger's fast path). Anything else goes through PyOS_string_to_double. */
static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

/* The double `float` reads from `[\d.]+` (number() said it takes it as it stands); -1 with an exception set on
 * an error (no valid text gives -1). */
static double double_of(const char *s, Py_ssize_t len) {
    uint64_t digits = 0;
    int count = 0, after = -1;  /* digits read; digits after the dot (-1: no dot yet) */
    for (Py_ssize_t i = 0; i < len; i++) {
        if (s[i] == '.') {
            after = 0;
            continue;
        }
        digits = digits * 10 + (uint64_t)(s[i] - '0');
        count++;
        if (after >= 0)
            after++;
    }
    if (count <= 15)
        return (double)digits / POW10[after < 0 ? 0 : after];
    char text[48];
    memcpy(text, s, (size_t)len);
    text[len] = '\0';
    return PyOS_string_to_double(text, NULL, NULL);
}

static PyObject *float_of(const char *s, Py_ssize_t len) {
    double value = double_of(s, len);
    if (value == -1.0 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(value);
}

static long long int_value(const char *s, Py_ssize_t len) {
    long long value = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        value = value * 10 + (s[i] - '0');
    return value;
}

static PyObject *int_of(const char *s, Py_ssize_t len) {
    return PyLong_FromLongLong(int_value(s, len));
}

/* The texts of the last few minutes, process tags and engines read: a busy log repeats each on line after line
 * (its DP engines in turn), so the same str is handed out again rather than decoded anew (immutable: sharing it
 * changes nothing). */
#define RECENT_SLOTS 4

typedef struct {
    char text[RECENT_SLOTS][64];
    Py_ssize_t len[RECENT_SLOTS];
    PyObject *str[RECENT_SLOTS];
    int next;  /* the slot the next new text takes */
} Recent;

static Recent recent_minute, recent_tag, recent_engine;

static PyObject *ascii_of(Recent *r, const char *s, Py_ssize_t n) {
    for (int i = 0; i < RECENT_SLOTS; i++)
        if (r->str[i] != NULL && r->len[i] == n && memcmp(r->text[i], s, (size_t)n) == 0)
            return Py_NewRef(r->str[i]);
    PyObject *str = PyUnicode_DecodeASCII(s, n, NULL);
    if (str != NULL && n <= (Py_ssize_t)sizeof r->text[0]) {
        int i = r->next;
        r->next = (i + 1) % RECENT_SLOTS;
        PyObject *old = r->str[i];
        r->str[i] = Py_NewRef(str);
        memcpy(r->text[i], s, (size_t)n);
        r->len[i] = n;
        Py_XDECREF(old);
    }
    return str;
}

/* Where the fields of a stats line in V1's plain shape are (offsets into the line). */
typedef struct {
    Py_ssize_t minute;        /* `MM-DD HH:MM`, 11 bytes */
    int second;
    Py_ssize_t tag0, tag1;    /* the process tag, `(APIServer pid=N)` (empty: none) */
    Py_ssize_t engine0, engine_len;
    int engine, hit;          /* whether the line names its engine, and its prefix cache hit rate */
    Py_ssize_t f[6][2];       /* pt, gt, running, waiting, kv, hit: start and length */
} Shape;

/* Whether [0, n) of s (ASCII, no CR, ESC or NUL: checked by the caller) is a stats line in V1's plain shape;
 * its fields' places in *out. */
static int stats_shape(const char *s, Py_ssize_t n, Shape *out) {
    Py_ssize_t i = find(s, n, 0, STATS_WORD);
    Py_ssize_t j = find(s, n, 0, "INFO ");
    if (i < 0 || j < 0 || j >= i)
        return 0;
    Py_ssize_t k = find(s, n, j + 19, "] ");
    if (k < 0 || k >= i)
        return 0;
    if (s[j + 7] != '-' || s[j + 10] != ' ' || s[j + 13] != ':' || s[j + 16] != ':')
        return 0;
    if (!(s[j + 17] >= '0' && s[j + 17] <= '9' && s[j + 18] >= '0' && s[j + 18] <= '9'))
        return 0;
    int second = (s[j + 17] - '0') * 10 + (s[j + 18] - '0');
    if (second > 59)
        return 0;
    Py_ssize_t t0 = 0, t1 = j;
    while (t0 < t1 && py_space((unsigned char)s[t0]))
        t0++;
    while (t1 > t0 && py_space((unsigned char)s[t1 - 1]))
        t1--;
    if (t0 > 0)
        return 0;  /* indented: maybe a pasted record (parsers/paste.py), the parser's to say */
    if (t1 > t0 && !(s[t0] == '(' && find(s + t0, t1 - t0, 0, "pid=") >= 0))
        return 0;  /* a tag, but not a process's: the parser's full path */
    Py_ssize_t at = k + 2;
    out->engine = out->hit = 0;
    if (literal(s, n, &at, "Engine ")) {
        if (!digits(s, n, &at, &out->engine0, &out->engine_len) || out->engine_len > 4 || !literal(s, n, &at, ": "))
            return 0;
        out->engine = 1;
    }
    Py_ssize_t (*f)[2] = out->f;
    if (!(literal(s, n, &at, STATS_WORD) && number(s, n, &at, &f[0][0], &f[0][1])
          && literal(s, n, &at, " tokens/s, Avg generation throughput: ") && number(s, n, &at, &f[1][0], &f[1][1])
          && literal(s, n, &at, " tokens/s, Running: ") && digits(s, n, &at, &f[2][0], &f[2][1])
          && literal(s, n, &at, " reqs, Waiting: ") && digits(s, n, &at, &f[3][0], &f[3][1])
          && literal(s, n, &at, " reqs, GPU KV cache usage: ") && number(s, n, &at, &f[4][0], &f[4][1])
          && literal(s, n, &at, "%")))
        return 0;
    Py_ssize_t after = at;
    if (literal(s, n, &after, ", CPU KV"))
        return 0;
    after = at;
    int plain = 0;
    if (literal(s, n, &after, ", Prefix cache hit rate: ") && number_text(s, n, &after, &f[5][0], &f[5][1], &plain)
        && literal(s, n, &after, "%")) {
        if (!plain)
            return 0;  /* the pattern takes it, `float` might not: the parser decides */
        out->hit = 1;
    }
    out->minute = j + 5;
    out->second = second;
    out->tag0 = t0;
    out->tag1 = t1;
    return 1;
}

/* The stats line of shape *sh as (start, stop, minute, second, tag, engine, pt, gt, running, waiting, kv, hit);
 * NULL on an error. */
static PyObject *stats_tuple(const char *s, const Shape *sh, Py_ssize_t start, Py_ssize_t stop) {
    const Py_ssize_t (*f)[2] = sh->f;
    PyObject *minute = ascii_of(&recent_minute, s + sh->minute, 11);
    PyObject *tag = ascii_of(&recent_tag, s + sh->tag0, sh->tag1 - sh->tag0);
    PyObject *eng = sh->engine ? ascii_of(&recent_engine, s + sh->engine0, sh->engine_len) : Py_NewRef(Py_None);
    PyObject *pt = float_of(s + f[0][0], f[0][1]);
    PyObject *gt = float_of(s + f[1][0], f[1][1]);
    PyObject *running = int_of(s + f[2][0], f[2][1]);
    PyObject *waiting = int_of(s + f[3][0], f[3][1]);
    PyObject *kv = float_of(s + f[4][0], f[4][1]);
    PyObject *rate = sh->hit ? float_of(s + f[5][0], f[5][1]) : Py_NewRef(Py_None);
    PyObject *first = PyLong_FromSsize_t(start), *last = PyLong_FromSsize_t(stop), *sec = PyLong_FromLong(sh->second);
    PyObject *items[12] = {first, last, minute, sec, tag, eng, pt, gt, running, waiting, kv, rate};
    PyObject *out = NULL;
    int whole = 1;
    for (int i = 0; i < 12; i++)
        whole &= items[i] != NULL;
    if (whole && (out = PyTuple_New(12)) != NULL) {  /* built directly: Py_BuildValue's format costs ~3 k */
        for (int i = 0; i < 12; i++)
            PyTuple_SET_ITEM(out, i, items[i]);  /* steals each */
        return out;
    }
    for (int i = 0; i < 12; i++)
        Py_XDECREF(items[i]);
    return NULL;
}

/* Whether [p, end) is ASCII without NUL, ESC or CR: the only lines read as stats lines here. */
static int plain_ascii(const unsigned char *p, const unsigned char *end) {
    for (; p < end; p++)
        if (*p >= 0x80 || *p == 0 || *p == 0x1b || *p == '\r')
            return 0;
    return 1;
}

/* Append a run of quiet lines as (count, start, stop); 0 or -1. */
static int add_run(PyObject *out, Py_ssize_t count, Py_ssize_t start, Py_ssize_t stop) {
    PyObject *run = Py_BuildValue("(nnn)", count, start, stop);
    if (run == NULL)
        return -1;
    int rc = PyList_Append(out, run);
    Py_DECREF(run);
    return rc;
}

PyDoc_STRVAR(split_doc,
"split(buf, final, stop, lines, max_line, max_quiet, literals, guards, stats, wraps) -> (items, used, done)\n\n"
"The lines of `buf` as a BoundedLines reader gives them (each through its newline, at most `max_line`\n"
"bytes; the last without one only when `final`), in order: a quiet line's run as (count, start, stop),\n"
"with `stats` vLLM's stats line in V1's plain shape as a 12-tuple (see stats_tuple), any other line as bytes.\n"
"`literals` None: no line is quiet. Stops after the line whose end reaches `stop` (-1: never), or after\n"
"`lines` lines (-1: no limit), then `done` is True. `used`: the bytes of `buf` the items cover. A line as\n"
"long as a multiple of one of `wraps` (terminal widths) is neither quiet nor read as a stats line.");

static PyObject *split(PyObject *self, PyObject *args) {
    Py_buffer view;
    int final, stats;
    Py_ssize_t stop, lines, max_line, max_quiet;
    PyObject *literals, *guards, *wrap_widths;
    if (!PyArg_ParseTuple(args, "y*pnnnnOO!pO!", &view, &final, &stop, &lines, &max_line, &max_quiet, &literals,
                          &PyTuple_Type, &guards, &stats, &PyTuple_Type, &wrap_widths))
        return NULL;
    Wraps wraps;
    if (wraps_build(&wraps, wrap_widths) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const Filter *filter = NULL;
    int filtering = literals != Py_None;
    if (max_line <= 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "max_line must be positive");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(guards); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(guards, i))) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "guards must be bytes");
            return NULL;
        }
    }
    if (filtering) {
        if (!PyTuple_Check(literals)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "literals must be a tuple of bytes or None");
            return NULL;
        }
        if ((filter = filter_of(literals)) == NULL) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len, at = 0, run = 0, run_start = 0;
    int done = 0;
    while (at < size) {
        Py_ssize_t room = size - at < max_line ? size - at : max_line;
        const unsigned char *nl = memchr(buf + at, '\n', (size_t)room);
        Py_ssize_t piece;
        if (nl != NULL)
            piece = (Py_ssize_t)(nl - (buf + at)) + 1;
        else if (room == max_line || final)
            piece = room;
        else
            break;  /* the rest of a line: wait for more bytes */
        Py_ssize_t text_end = at + piece - (nl != NULL);
        int holds = held(&wraps, text_end - at);  /* for a quiet or stats line (ASCII) bytes are characters */
        int is_quiet = filtering && !holds && text_end - at <= MAX_QUIET_LINE
                       && !maybe_pasted(buf + at, buf + text_end)
                       && quiet(filter, buf + at, buf + text_end, guards, max_quiet);
        if (is_quiet) {
            if (run == 0)
                run_start = at;
            run++;
        } else {
            if (run && add_run(out, run, run_start, at) < 0)
                goto fail;
            run = 0;
            PyObject *line = NULL;
            /* the stats word first (memchr's pace): most lines that are not quiet are not stats lines */
            if (stats && !holds && (nl != NULL || final)
                && find((const char *)buf + at, text_end - at, 0, STATS_WORD) >= 0
                && plain_ascii(buf + at, buf + text_end)) {
                Shape shape;
                if (stats_shape((const char *)buf + at, text_end - at, &shape)
                    && (line = stats_tuple((const char *)buf + at, &shape, at, at + piece)) == NULL)
                    goto fail;
            }
            if (line == NULL)
                line = PyBytes_FromStringAndSize((const char *)buf + at, piece);
            if (line == NULL)
                goto fail;
            int rc = PyList_Append(out, line);
            Py_DECREF(line);
            if (rc < 0)
                goto fail;
        }
        at += piece;
        if (lines >= 0 && (nl != NULL || piece < max_line))
            lines--;  /* a line read (a piece that ends without a newline is not one) */
        if ((stop >= 0 && at >= stop) || lines == 0) {
            done = 1;
            break;
        }
    }
    if (run && add_run(out, run, run_start, at) < 0)
        goto fail;
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(NnO)", out, at, done ? Py_True : Py_False);
    return result;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

PyDoc_STRVAR(whole_doc,
"whole(buf, start, stop, room, max_line) -> (count, end, ascii)\n\n"
"The whole lines of `buf` from `start`, each through its newline, ending at or before `stop`: at most\n"
"`room` of them, and none after the first whose text (without its newline) is over `max_line` bytes.\n"
"`count` lines end at `end`; `ascii` says whether those bytes are all ASCII. The daemon's tailer asks\n"
"this before it hands a plain file's run of lines on as bytes (agent/sources/rawlines.py).");

static PyObject *whole(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, stop, room, max_line;
    if (!PyArg_ParseTuple(args, "y*nnnn", &view, &start, &stop, &room, &max_line))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    if (stop > view.len)
        stop = view.len;
    if (start < 0)
        start = 0;
    Py_ssize_t at = start, count = 0;
    unsigned char seen = 0;
    while (at < stop && count < room) {
        const unsigned char *nl = memchr(buf + at, '\n', (size_t)(stop - at));
        if (nl == NULL)
            break;
        Py_ssize_t end = (Py_ssize_t)(nl - buf) + 1;
        if (end - 1 - at > max_line)
            break;
        for (const unsigned char *p = buf + at; p < nl; p++)
            seen |= *p;
        at = end;
        count++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnO)", count, at, seen < 0x80 ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, split_doc},
    {"whole", whole, METH_VARARGS, whole_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lane",
    "Line splitting and the literal pre-filter of the plain-file paths (parsers/_lane.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lane(void) {
    return PyModule_Create(&module);
}
