/* The common CSV block parsed in C (prep.sources.table, issue 40): pyarrow's CSV reader as
   prep calls it spends ~8 ns a byte; this tokenizes a block once, then types each column from
   all its cells, converts them and dictionary-encodes text, and returns what pyarrow would
   (the same types, nulls, values and dictionaries, in first-appearance order). Optional:
   built by setup.py where a C compiler is; without it, or for a block it does not take,
   pyarrow parses (tests/test_table_csv.py holds the two together on generated blocks).

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
/* A number's cell: INT, DEC (a decimal) or ODD (pyarrow may read it as some other type: the
   block goes to pyarrow unless its column is text). */
enum { C_INT, C_DEC, C_ODD };

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int is_na(const char *p, size_t len, PyObject *na) {
    if (len == 0) return 1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(na); k++) {
        PyObject *v = PyTuple_GET_ITEM(na, k);
        if ((size_t)PyBytes_GET_SIZE(v) == len && memcmp(PyBytes_AS_STRING(v), p, len) == 0)
            return 1;
    }
    return 0;
}

static int word(const char *p, size_t len, const char *w) {
    if (len != strlen(w)) return 0;
    for (size_t k = 0; k < len; k++)
        if ((p[k] | 0x20) != w[k]) return 0;
    return 1;
}

/* Text no pyarrow type takes (those of other types start with a digit, a sign, a dot or a
   space, or are one of these words in some case). */
static int plain_text(const char *p, size_t len) {
    if (len == 0) return 1; /* only quoted: "" is an empty string */
    char c = p[0];
    if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == ' ' || c == '\t')
        return 0;
    if (p[len - 1] == ' ' || p[len - 1] == '\t') return 0;
    return !(word(p, len, "inf") || word(p, len, "infinity") || word(p, len, "nan") ||
             word(p, len, "true") || word(p, len, "false"));
}

static int digits(const char *p, size_t len, size_t *k, uint64_t *m, int *nd) {
    size_t k0 = *k;
    while (*k < len && p[*k] >= '0' && p[*k] <= '9') {
        if (*nd < 19) *m = *m * 10 + (uint64_t)(p[*k] - '0');
        if (*m || *nd) (*nd)++; /* significant digits: leading zeros left out */
        (*k)++;
    }
    return *k > k0;
}

/* A number's cell: C_INT (*iv), C_DEC (*dv) or C_ODD. */
static int number(const char *p, size_t len, int64_t *iv, double *dv) {
    size_t k = 0;
    int neg = p[0] == '-', nd = 0, frac = 0, ex = 0, eneg = 0;
    uint64_t m = 0;
    k += neg;
    if (!digits(p, len, &k, &m, &nd)) return C_ODD;
    if (k == len) {
        if (nd > 18) return C_ODD; /* may not fit int64: pyarrow's */
        *iv = neg ? -(int64_t)m : (int64_t)m;
        return C_INT;
    }
    if (p[k] == '.') {
        size_t k0 = ++k;
        if (!digits(p, len, &k, &m, &nd)) return C_ODD;
        frac = (int)(k - k0);
    }
    if (k < len && (p[k] == 'e' || p[k] == 'E')) {
        k++;
        if (k < len && (p[k] == '-' || p[k] == '+')) eneg = p[k++] == '-';
        size_t k0 = k;
        while (k < len && p[k] >= '0' && p[k] <= '9' && k - k0 < 6) ex = ex * 10 + (p[k++] - '0');
        if (k == k0) return C_ODD;
    }
    if (k != len) return C_ODD;
    int e = (eneg ? -ex : ex) - frac;
    if (nd <= 15 && e >= -22 && e <= 22) { /* exact: m < 2^53, 10^|e| a double */
        double d = (double)m;
        d = e < 0 ? d / POW10[-e] : d * POW10[e];
        *dv = neg ? -d : d;
        return C_DEC;
    }
    char buf[64];
    if (len >= sizeof buf) return C_ODD;
    memcpy(buf, p, len), buf[len] = 0;
    double d = strtod(buf, NULL);
    if (d - d != 0 || (d == 0 && m != 0) || (d != 0 && (d < 2.3e-308 && d > -2.3e-308)))
        return C_ODD; /* inf, or under/denormal: left to pyarrow */
    *dv = d;
    return C_DEC;
}

static int utf8_ok(const uint8_t *p, size_t len) {
    size_t k = 0;
    while (k < len) {
        uint8_t c = p[k];
        int more = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (more < 0 || k + more >= len) return 0;
        uint32_t u = more == 0 ? c : c & (0x3f >> more);
        for (int j = 1; j <= more; j++) {
            if ((p[k + j] & 0xc0) != 0x80) return 0;
            u = u << 6 | (p[k + j] & 0x3f);
        }
        static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
        if (u < least[more] || u > 0x10ffff || (u >= 0xd800 && u <= 0xdfff)) return 0;
        k += more + 1;
    }
    return 1;
}

static const uint64_t POW10I[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

static uint64_t load8(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* `room`: bytes readable from p. */
static uint64_t hash_of(const char *p, size_t len, size_t room) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ len, w = 0;
    if (len <= 8) { /* a short value as one word (little-endian, zero above) */
        if (room >= 8) w = len ? load8(p) & (~0ull >> (64 - 8 * len)) : 0;
        else memcpy(&w, p, len);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    } else {
        for (size_t k = 0; k < len; k++) h = (h ^ (uint8_t)p[k]) * 0x100000001B3ull;
    }
    return h ^ (h >> 31);
}

/* How many of the 8 bytes of w (little-endian) lead with digits: those with b - '0' < 10
   (a borrow or a carry only reaches the bytes above the first other one). */
static int digit_run(uint64_t w) {
    uint64_t t = w - 0x3030303030303030ull;
    uint64_t bad = (t | (t + 0x7676767676767676ull)) & 0x8080808080808080ull;
    return bad ? __builtin_ctzll(bad) >> 3 : 8;
}

/* The value of w's first k digits, 1 <= k <= 8 (three multiplies: simdjson's). */
static uint64_t digits_value(uint64_t w, int k) {
    w = (w << (8 * (8 - k))) & 0x0F0F0F0F0F0F0F0Full;
    w = (w * 2561) >> 8 & 0x00FF00FF00FF00FFull;
    w = (w * 6553601) >> 16 & 0x0000FFFF0000FFFFull;
    return (w * 42949672960001ull) >> 32;
}

/* The common number -?D{1,7}(.D{1,7})?, without a loop: C_INT or C_DEC, *b: where it ends;
   C_ODD: number() decides. 18 bytes at least are readable from p. */
static int quick(const char *p, size_t *b, int64_t *iv, double *dv) {
    int neg = p[0] == '-', k, f;
    uint64_t w = load8(p + neg), m;
    if ((k = digit_run(w)) == 0 || k == 8) return C_ODD;
    m = digits_value(w, k);
    if (p[neg + k] != '.') {
        *iv = (int64_t)((m ^ -(uint64_t)neg) + (uint64_t)neg), *b = (size_t)(neg + k); /* no branch */
        return C_INT;
    }
    w = load8(p + neg + k + 1);
    if ((f = digit_run(w)) == 0 || f == 8) return C_ODD;
    double d = (double)(int64_t)(m * POW10I[f] + digits_value(w, f)) / POW10[f]; /* < 2^53 */
    uint64_t bits;
    memcpy(&bits, &d, 8);
    bits |= (uint64_t)neg << 63; /* the sign without a branch (it is random) */
    memcpy(dv, &bits, 8), *b = (size_t)(neg + k + 1 + f);
    return C_DEC;
}

typedef struct {
    int kind, odd, forced;  /* kind: K_NULL, K_INT, K_FLOAT or K_TEXT; odd: a C_ODD cell */
    int text;               /* text from the first row (a plain text cell below: read again) */
    Py_ssize_t nulls;
    PyObject *valid, *vals; /* a bitmap; int64s, doubles or (text) int32 indices */
    uint8_t *v;
    char *out;
    uint32_t *slot;         /* text: hash table of value + 1 (0: empty), `cap` slots */
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
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (off == NULL || slot == NULL) return free(slot), -1;
    if (col->nv == 0) off[0] = 0;
    for (size_t v = 0; v < col->nv; v++) {
        const char *p = col->data + off[v];
        size_t len = off[v + 1] - off[v], h = hash_of(p, len, col->bytes - off[v]) & (cap - 1);
        while (slot[h]) h = (h + 1) & (cap - 1);
        slot[h] = (uint32_t)v + 1;
    }
    free(col->slot);
    col->slot = slot, col->cap = cap, col->room = room;
    return 0;
}

static int same(const char *a, const char *b, size_t len) {
    for (size_t k = 0; k < len; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

/* A text cell's value index; -1: not UTF-8 or no memory (pyarrow's then). */
static int32_t intern(Column *col, const char *p, size_t len, size_t room) {
    size_t h = hash_of(p, len, room) & (col->cap - 1);
    for (uint32_t e; (e = col->slot[h]) != 0; h = (h + 1) & (col->cap - 1)) {
        size_t v = e - 1;
        if ((size_t)(col->off[v + 1] - col->off[v]) == len && same(col->data + col->off[v], p, len))
            return (int32_t)v;
    }
    if (!col->forced && !utf8_ok((const uint8_t *)p, len)) return -1;
    if (col->bytes + len > INT32_MAX || col->nv >= INT32_MAX - 1) return -1;
    if (col->bytes + len > col->space) {
        size_t space = 2 * (col->bytes + len) + 4096;
        char *data = realloc(col->data, space);
        if (data == NULL) return -1;
        col->data = data, col->space = space;
    }
    memcpy(col->data + col->bytes, p, len);
    col->bytes += len;
    col->slot[h] = (uint32_t)(col->nv + 1);
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
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < buf.len; i++) count += s[i] == '"'; /* vectorised */
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
