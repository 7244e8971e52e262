/* The compiled lane of `scan`'s plain-file path: line splitting and the literal pre-filter, in C.
 *
 * Most lines of a busy log are quiet: they hold none of the literals a parser looks for, so the parser
 * would only count them. Python pays for every such line anyway (a bytes object, a decode, a call and a
 * regular-expression search). `split` cuts a buffer into the lines a `BoundedLines` reader would give
 * (at each newline, or at `max_line` bytes for a longer line) and tells the quiet ones without making any
 * Python object for them: a run of quiet lines comes back as one (count, start, stop) tuple, every other
 * line as its own bytes object, in order. The caller (agent/sources/plain_lane.py) hands the others to the
 * parser unchanged, so the Python parser stays the reference for everything it decides.
 *
 * A line is quiet only when all of these hold, so that `feed` would do nothing but count it:
 *   - it is ASCII without NUL, ESC or CR (no decoding, no cleaning up, the same text in bytes and in str);
 *   - it holds no single quote or backslash, an even number of double quotes, and at most `max_quiet`
 *     bytes before its newline (then no request text can open on it: parsers/redact.py's
 *     `opens_request_text` is False);
 *   - it holds none of the literals (the parser's pre-filter and stats words, parsers/quiet.py).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BAD 1u    /* a byte that makes a line not quiet on its own */
#define QUOTE 2u  /* a double quote: counted */
#define FIRST 4u  /* the first byte of a literal of two bytes or more */

typedef struct {
    unsigned char cls[256];
    unsigned char pairs[65536 / 8];    /* the first two bytes of each literal, as a bit set */
    Py_ssize_t head[256];              /* per first byte: the first literal (index), -1 for none */
    Py_ssize_t *next;                  /* the next literal with the same first byte */
    const char **text;
    Py_ssize_t *len;
    Py_ssize_t count;
} Filter;

static void filter_free(Filter *f) {
    PyMem_Free(f->next);
    PyMem_Free(f->text);
    PyMem_Free(f->len);
}

/* Build the filter from a tuple of bytes (the literals). Returns 0, or -1 with an exception set. */
static int filter_build(Filter *f, PyObject *literals) {
    memset(f->cls, 0, sizeof f->cls);
    memset(f->pairs, 0, sizeof f->pairs);
    for (int c = 0; c < 256; c++) {
        f->head[c] = -1;
        if (c >= 0x80 || c == 0 || c == 0x1b || c == '\r' || c == '\'' || c == '\\')
            f->cls[c] = BAD;
    }
    f->cls['"'] |= QUOTE;
    f->count = PyTuple_GET_SIZE(literals);
    f->next = PyMem_New(Py_ssize_t, f->count ? f->count : 1);
    f->text = PyMem_New(const char *, f->count ? f->count : 1);
    f->len = PyMem_New(Py_ssize_t, f->count ? f->count : 1);
    if (f->next == NULL || f->text == NULL || f->len == NULL) {
        filter_free(f);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < f->count; i++) {
        PyObject *item = PyTuple_GET_ITEM(literals, i);
        if (!PyBytes_Check(item)) {
            filter_free(f);
            PyErr_SetString(PyExc_TypeError, "literals must be bytes");
            return -1;
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
        f->next[i] = f->head[s[0]];
        f->head[s[0]] = i;
    }
    return 0;
}

/* Whether the text [p, end) is quiet (see the top of the file). */
static int quiet(const Filter *f, const unsigned char *p, const unsigned char *end) {
    unsigned quotes = 0;
    for (const unsigned char *q = p; q < end; q++) {
        unsigned t = f->cls[*q];
        if (t == 0)
            continue;
        if (t & BAD)
            return 0;
        if (t & QUOTE)
            quotes++;
        if ((t & FIRST) && q + 1 < end) {
            unsigned pair = ((unsigned)q[0] << 8) | q[1];
            if (f->pairs[pair >> 3] & (1u << (pair & 7))) {
                for (Py_ssize_t i = f->head[*q]; i >= 0; i = f->next[i]) {
                    Py_ssize_t n = f->len[i];
                    if (end - q >= n && memcmp(q, f->text[i], (size_t)n) == 0)
                        return 0;
                }
            }
        }
    }
    return (quotes & 1u) == 0;
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
"split(buf, final, stop, max_line, max_quiet, literals) -> (items, used, done)\n\n"
"The lines of `buf` as a BoundedLines reader gives them (each through its newline, at most `max_line`\n"
"bytes; the last without one only when `final`), in order: a quiet line's run as (count, start, stop),\n"
"any other line as bytes. `literals` None: no line is quiet. Stops after the line whose end reaches\n"
"`stop` (-1: never), then `done` is True. `used`: the bytes of `buf` the items cover.");

static PyObject *split(PyObject *self, PyObject *args) {
    Py_buffer view;
    int final;
    Py_ssize_t stop, max_line, max_quiet;
    PyObject *literals;
    if (!PyArg_ParseTuple(args, "y*pnnnO", &view, &final, &stop, &max_line, &max_quiet, &literals))
        return NULL;
    Filter filter;
    int filtering = literals != Py_None;
    if (max_line <= 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "max_line must be positive");
        return NULL;
    }
    if (filtering) {
        if (!PyTuple_Check(literals)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "literals must be a tuple of bytes or None");
            return NULL;
        }
        if (filter_build(&filter, literals) < 0) {
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
        int is_quiet = filtering && text_end - at <= max_quiet && quiet(&filter, buf + at, buf + text_end);
        if (is_quiet) {
            if (run == 0)
                run_start = at;
            run++;
        } else {
            if (run && add_run(out, run, run_start, at) < 0)
                goto fail;
            run = 0;
            PyObject *line = PyBytes_FromStringAndSize((const char *)buf + at, piece);
            if (line == NULL)
                goto fail;
            int rc = PyList_Append(out, line);
            Py_DECREF(line);
            if (rc < 0)
                goto fail;
        }
        at += piece;
        if (stop >= 0 && at >= stop) {
            done = 1;
            break;
        }
    }
    if (run && add_run(out, run, run_start, at) < 0)
        goto fail;
    if (filtering)
        filter_free(&filter);
    PyBuffer_Release(&view);
    PyObject *result = Py_BuildValue("(NnO)", out, at, done ? Py_True : Py_False);
    return result;
fail:
    Py_XDECREF(out);
    if (filtering)
        filter_free(&filter);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, split_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lane",
    "Line splitting and the literal pre-filter of scan's plain-file path (parsers/_lane.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lane(void) {
    return PyModule_Create(&module);
}
