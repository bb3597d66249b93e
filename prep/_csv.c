/* The common CSV block parsed in C (prep.sources.table, issue 40): pyarrow's CSV reader as
   prep calls it spends ~8 ns a byte (bench block: 137 ms); this reads each cell once,
   converting it as it goes (a column's kind, decided over all its cells, only widens: int to
   float; a column found to be text reads the block again), dictionary-encodes text, and
   returns what pyarrow would: the same types, nulls, values and dictionaries (in
   first-appearance order). Bench block: 47 ms. Optional: built by setup.py where a C compiler
   is; without it, or for a block it does not take, pyarrow parses (tests/test_table_csv.py
   holds the two together on generated blocks).

   quotes(data) -> how many '"' it holds (a block is cut where the count before is even)
   parse(data, ncols, sep, na, forced) -> None (pyarrow parses the block) or (rows, columns)
   data:   the block's rows (no header), each ending in \n or \r\n (the last may not)
   na:     tuple of bytes: cell texts that are missing besides "" (quoted cells never are)
   forced: tuple of ncols bools: text whatever the cells (dictionary<int32, binary>)
   a column: ("null",) | ("int", valid, int64s) | ("float", valid, doubles)
             | ("text", valid, int32 indices, int32 offsets, values); valid: a bitmap or None

   It takes a block whose cells are empty, integers (-?D{1,18}), decimals
   (-?D+(.D+)?([eE][-+]?D+)?, parsed exactly: Clinger's fast path where the digits fit 2^53
   and |exponent| <= 22, else strtod, as pyarrow's correctly rounded parser), or text that no
   pyarrow type takes (it starts with none of 0-9 + - . space tab, and is not inf/nan/true/
   false), quoted or not when no quote, \r or \n is inside. Anything else — a row of another
   field count, an empty line, a bare \r, a quote inside a cell, a cell pyarrow may read as a
   bool, date, time, inf or nan or with spaces around, invalid UTF-8 — gives None. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_NULL, K_INT, K_FLOAT, K_TEXT, K_FAIL };
#include "_csv_cells.h"

/* A value in a hash table: its first 8 bytes (all of a short one: found without reading
   further), its length, its index + 1 (0: an empty slot). */
typedef struct {
    uint64_t word;
    uint32_t len, id;
} Slot;

typedef struct {
    int kind, odd, forced;  /* kind: K_NULL, K_INT, K_FLOAT or K_TEXT; odd: a C_ODD cell */
    int text;               /* text from the first row (a plain text cell below: read again) */
    Py_ssize_t nulls;
    PyObject *valid, *vals; /* a bitmap; int64s, doubles or (text) int32 indices */
    uint8_t *v;
    char *out;
    Slot *slot;             /* text: a hash table of `cap` slots */
    int32_t *off;           /* text: the values' offsets into `data`, nv + 1 */
    char *data;
    size_t cap, nv, room, bytes, space;
} Column;

static void reset(Column *col) {
    free(col->slot), free(col->off), free(col->data);
    col->slot = NULL, col->off = NULL, col->data = NULL;
    col->cap = col->nv = col->room = col->bytes = col->space = 0;
    col->kind = col->forced || col->text ? K_TEXT : K_NULL;
    col->odd = 0, col->nulls = 0;
}

/* Room for twice the values; -1: no memory. */
static int grow(Column *col) {
    size_t room = col->room ? 2 * col->room : 256, cap = 2 * room; /* half full at most */
    int32_t *off = realloc(col->off, (room + 1) * sizeof *off);
    if (off != NULL) col->off = off;
    Slot *slot = calloc(cap, sizeof *slot);
    if (off == NULL || slot == NULL) return free(slot), -1;
    if (col->nv == 0) off[0] = 0;
    for (size_t k = 0; k < col->cap; k++) {
        Slot e = col->slot[k];
        if (e.id == 0) continue;
        size_t h = hash_of(col->data + off[e.id - 1], e.len, e.word) & (cap - 1);
        while (slot[h].id) h = (h + 1) & (cap - 1);
        slot[h] = e;
    }
    free(col->slot);
    col->slot = slot, col->cap = cap, col->room = room;
    return 0;
}

/* A text cell's value index; -1: not UTF-8 or no memory (pyarrow's then). */
static int32_t intern(Column *col, const char *p, size_t len, size_t room) {
    uint64_t w = word_of(p, len, room);
    size_t h = hash_of(p, len, w) & (col->cap - 1);
    for (Slot *e; (e = &col->slot[h])->id != 0; h = (h + 1) & (col->cap - 1))
        if (e->word == w && e->len == len &&
            (len <= 8 || memcmp(col->data + col->off[e->id - 1], p, len) == 0))
            return (int32_t)e->id - 1;
    if (!col->forced && !utf8_ok((const uint8_t *)p, len)) return -1;
    if (col->bytes + len > INT32_MAX || col->nv >= INT32_MAX - 1) return -1;
    if (col->data == NULL || col->bytes + len > col->space) {
        size_t space = 2 * (col->bytes + len) + 4096;
        char *data = realloc(col->data, space);
        if (data == NULL) return -1;
        col->data = data, col->space = space;
    }
    memcpy(col->data + col->bytes, p, len);
    col->bytes += len;
    col->slot[h] = (Slot){w, (uint32_t)len, (uint32_t)(col->nv + 1)};
    col->off[++col->nv] = (int32_t)col->bytes;
    if (col->nv == col->room && grow(col) < 0) return -1;
    return (int32_t)(col->nv - 1);
}

enum { OK, PYARROW, AGAIN }; /* AGAIN: a column turned out text below its first row */

/* The column's kind with row r's number (its value written as `got` says). */
static void typed(Column *col, int got, Py_ssize_t r) {
    int64_t *iv = (int64_t *)col->out;
    double *dv = (double *)col->out;
    if (got == C_ODD) {
        col->odd = 1;
    } else if (got == C_DEC && col->kind != K_FLOAT) {
        for (Py_ssize_t k = 0; k < r; k++) dv[k] = (double)iv[k]; /* integers so far */
        col->kind = K_FLOAT;
    } else if (got == C_INT && col->kind == K_FLOAT) {
        dv[r] = (double)iv[r];
    } else if (col->kind == K_NULL) {
        col->kind = K_INT;
    }
}

/* Row r's cell [a, b) of a column, of data n bytes long. */
static int add(Column *col, const char *s, size_t a, size_t b, int quoted, Py_ssize_t r,
               PyObject *na, size_t n) {
    const char *p = s + a;
    size_t len = b - a;
    int64_t *iv = (int64_t *)col->out;
    double *dv = (double *)col->out;
    if (!quoted && is_na(p, len, na)) {
        col->v[r >> 3] &= (uint8_t) ~(1u << (r & 7));
        col->nulls++, iv[r] = 0;
        return OK;
    }
    if (col->kind == K_TEXT) {
        int32_t i = intern(col, p, len, n - a);
        return i < 0 ? PYARROW : (((int32_t *)col->out)[r] = i, OK);
    }
    if (plain_text(p, len)) {
        col->text = 1;
        return AGAIN;
    }
    typed(col, quoted && is_na(p, len, na) ? C_ODD : number(p, len, &iv[r], &dv[r]), r);
    return OK;
}

/* The rows of `data`, each cell typed and converted as it is read (its column's kind decided
   over all); the row count, or -PYARROW or -AGAIN. */
static Py_ssize_t tokenize(const char *s, Py_ssize_t n, char sep, Py_ssize_t cap, Column *cols,
                           int ncols, PyObject *na) {
    uint8_t stop[256] = {0}, ends[256] = {0};
    stop[(uint8_t)sep] = stop['\n'] = stop['\r'] = stop['"'] = 1;
    ends[(uint8_t)sep] = ends['\n'] = ends['\r'] = 1; /* a cell's ends */
    int has_na = PyTuple_GET_SIZE(na) > 0;
    Py_ssize_t i = 0, row = 0;
    while (i < n) {
        if (row >= cap || s[i] == '\n' || s[i] == '\r') return -PYARROW; /* an empty line */
        for (int col = 0; col < ncols; col++) {
            Py_ssize_t a = i;
            int quoted = i < n && s[i] == '"', got;
            Column *c = &cols[col];
            size_t len;
            if (!quoted && c->kind != K_TEXT && n - i > 17 &&
                (got = quick(s + i, &len, (int64_t *)c->out + row, (double *)c->out + row)) != C_ODD &&
                ends[(uint8_t)s[i + len]] && !(has_na && is_na(s + i, len, na))) {
                typed(c, got, row); /* the common number: no second look at its bytes */
                i += len;
            } else if (quoted) {
                for (++i; i < n && s[i] != '"'; i++)
                    if (s[i] == '\n' || s[i] == '\r') return -PYARROW;
                if (i++ >= n) return -PYARROW;
                if ((got = add(c, s, a + 1, i - 1, 1, row, na, n)) != OK) return -got;
            } else {
                while (i < n && !stop[(uint8_t)s[i]]) i++;
                if ((got = add(c, s, a, i, 0, row, na, n)) != OK) return -got;
            }
            if (col < ncols - 1) {
                if (i >= n || s[i] != sep) return -PYARROW; /* too few fields, a stray quote */
                i++;
            }
        }
        if (i < n && s[i] == '\r') i++;
        if (i < n && s[i] != '\n') return -PYARROW; /* too many fields, a stray quote or \r */
        i++, row++;
    }
    for (int col = 0; col < ncols; col++)
        if (cols[col].odd && cols[col].kind != K_TEXT) return -PYARROW;
    return row;
}

/* A column's tuple (with the GIL). */
static PyObject *wrapped(Column *col) {
    PyObject *bits = col->nulls ? col->valid : Py_None;
    if (col->kind == K_NULL) return Py_BuildValue("(s)", "null");
    if (col->kind != K_TEXT)
        return Py_BuildValue("(sOO)", col->kind == K_INT ? "int" : "float", bits, col->vals);
    return Py_BuildValue("(sOOy#y#)", "text", bits, col->vals, (const char *)col->off,
                         (Py_ssize_t)(col->nv + 1) * 4, col->data ? col->data : "",
                         (Py_ssize_t)col->bytes);
}

/* The columns' tuples, or Py_None where the block is pyarrow's. */
static PyObject *columns(const char *s, Py_ssize_t n, char sep, Py_ssize_t cap, PyObject *na,
                         PyObject *forced) {
    int ncols = (int)PyTuple_GET_SIZE(forced), ok = 1;
    Column *cols = calloc(ncols, sizeof *cols);
    PyObject *out = NULL, *list = NULL;
    Py_ssize_t rows = -AGAIN;
    for (int k = 0; k < ncols && ok && cols != NULL; k++) {
        Column *c = &cols[k];
        c->forced = PyObject_IsTrue(PyTuple_GET_ITEM(forced, k));
        c->valid = PyBytes_FromStringAndSize(NULL, (cap + 7) / 8);
        c->vals = PyBytes_FromStringAndSize(NULL, cap * 8);
        ok = c->valid != NULL && c->vals != NULL;
        if (ok) c->v = (uint8_t *)PyBytes_AS_STRING(c->valid), c->out = PyBytes_AS_STRING(c->vals);
    }
    if (cols != NULL && ok) {
        Py_BEGIN_ALLOW_THREADS
        for (int again = 0; rows == -AGAIN && again <= ncols; again++) {
            for (int k = 0; k < ncols && ok; k++) {
                reset(&cols[k]);
                memset(cols[k].v, 0xff, (cap + 7) / 8);
                ok = cols[k].kind != K_TEXT || grow(&cols[k]) == 0;
            }
            rows = ok ? tokenize(s, n, sep, cap, cols, ncols, na) : -PYARROW;
        }
        Py_END_ALLOW_THREADS
        list = rows >= 0 ? PyList_New(ncols) : NULL;
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    for (int k = 0; k < ncols && list != NULL; k++) {
        PyObject *one = wrapped(&cols[k]);
        if (one == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, k, one);
    }
    if (list != NULL) out = Py_BuildValue("(nN)", rows, list);
    else if (!PyErr_Occurred()) out = Py_NewRef(Py_None);
    for (int k = 0; k < ncols && cols != NULL; k++) {
        Py_XDECREF(cols[k].valid), Py_XDECREF(cols[k].vals);
        free(cols[k].slot), free(cols[k].off), free(cols[k].data);
    }
    free(cols);
    return out;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int ncols;
    char sep;
    PyObject *na, *forced, *out = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*icO!O!", &buf, &ncols, &sep, &PyTuple_Type, &na,
                          &PyTuple_Type, &forced))
        return NULL;
    const char *s = buf.buf;
    Py_ssize_t n = buf.len, cap = 1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(na); k++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(na, k))) {
            PyErr_SetString(PyExc_TypeError, "na: a tuple of bytes");
            goto done;
        }
    if (ncols < 1 || PyTuple_GET_SIZE(forced) != ncols || n > INT32_MAX) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    for (const char *p = s; (p = memchr(p, '\n', s + n - p)) != NULL; p++) cap++;
    out = columns(s, n, sep, cap, na, forced);
done:
    PyBuffer_Release(&buf);
    return out;
}

/* quotes(data) -> how many '"' it holds (where a block may be cut: an even count before). */
static PyObject *quotes(PyObject *self, PyObject *arg) {
    Py_buffer buf;
    size_t count = 0;
    (void)self;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *s = buf.buf;
    Py_ssize_t i = 0;
    Py_BEGIN_ALLOW_THREADS
    /* In runs of 255 x 64 bytes, 64 byte-wide counters (none passes 255): the compiler makes
       them a few SIMD registers, 64 bytes a step; a size_t counter widens every byte (4x). */
    for (; i + 255 * 64 <= buf.len; i += 255 * 64) {
        uint8_t lane[64] = {0};
        for (int k = 0; k < 255 * 64; k += 64)
            for (int j = 0; j < 64; j++) lane[j] += s[i + k + j] == '"';
        for (int j = 0; j < 64; j++) count += lane[j];
    }
    for (; i < buf.len; i++) count += s[i] == '"';
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromSize_t(count);
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS, "parse(data, ncols, sep, na, forced): a CSV block's columns"},
    {"quotes", quotes, METH_O, "quotes(data): how many '\"' bytes it holds"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csv", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__csv(void) { return PyModule_Create(&module); }
