/* A CSV cell's kind and value (prep/_csv.c): the numbers pyarrow reads, exactly as it rounds
   them; the text no pyarrow type takes; UTF-8; a short value's hash. Included once, by _csv.c. */

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

/* A value's first 8 bytes as one word (little-endian, zero above a shorter one); `room`: bytes
   readable from p. */
static uint64_t word_of(const char *p, size_t len, size_t room) {
    uint64_t w = 0;
    if (room >= 8) return len >= 8 ? load8(p) : len ? load8(p) & (~0ull >> (64 - 8 * len)) : 0;
    memcpy(&w, p, len < 8 ? len : 8);
    return w;
}

/* A value's hash: a short one's from its word alone. */
static uint64_t hash_of(const char *p, size_t len, uint64_t w) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ len;
    if (len <= 8) {
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
    uint64_t w = load8(p + neg), m, w2;
    if ((k = digit_run(w)) == 0 || k == 8) return C_ODD;
    if (p[neg + k] != '.') {
        m = digits_value(w, k);
        *iv = (int64_t)((m ^ -(uint64_t)neg) + (uint64_t)neg), *b = (size_t)(neg + k); /* no branch */
        return C_INT;
    }
    w2 = load8(p + neg + k + 1);
    if ((f = digit_run(w2)) == 0 || f == 8) return C_ODD;
    if (k + f <= 8) /* the digits without the dot in one word: one conversion */
        m = digits_value((w & (~0ull >> (64 - 8 * k))) | w2 << (8 * k), k + f);
    else
        m = digits_value(w, k) * POW10I[f] + digits_value(w2, f);
    double d = (double)(int64_t)m / POW10[f]; /* m < 10^14 < 2^53: exact */
    uint64_t bits;
    memcpy(&bits, &d, 8);
    bits |= (uint64_t)neg << 63; /* the sign without a branch (it is random) */
    memcpy(dv, &bits, 8), *b = (size_t)(neg + k + 1 + f);
    return C_DEC;
}
