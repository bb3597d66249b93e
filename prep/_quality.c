/* The quality scores' statistics in one call (prep.media.image.quality, issue 39): in a pack the
   numpy and OpenCV path makes ~20 calls on arrays of a few thousand values, each giving up the
   GIL and finding cold caches, and costs several times its arithmetic. Optional: built by
   setup.py where a C compiler is; quality.py's numpy path computes the same values without it
   (tests/test_quality.py holds the two together).

   stats(small, grey, side) -> (gray_std, lap_std, p99, p5, thumb, chroma, mean0..2, std0..2)
   small: uint8 (H, W, 3) RGB or (H, W) grey, C-contiguous: the SIDE px copy
   grey:  uint8 (H, W), C-contiguous: its grey (OpenCV's cvtColor: SIMD, cheaper than a loop here)
   side:  the sample's shorter side: every (min(H, W) // side)-th pixel, as cv::resize's
     INTER_NEAREST picks them
   gray_std, lap_std: standard deviations of the grey and of its 3x3
     Laplacian (OpenCV's ksize=1 kernel, border reflected as BORDER_REFLECT_101);
   p99, p5: the sample's brightness sqrt(.241 R^2 + .691 G^2 + .068 B^2) at those ranks of
     np.percentile's "lower" method;
   thumb: the entropy (bits) of information()'s stretched 32 px thumbnail;
   chroma: the mean of each sample pixel's max - min channel;
   mean, std: of each sample channel (grey: its own, thrice). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STRETCH 8.0

static double std_of(double s, double sq, double n) {
    double var = sq / n - (s / n) * (s / n);
    return var > 0 ? sqrt(var) : 0.0;
}

static int reflect(int i, int n) { return i < 0 ? (n > 1 ? -i : 0) : (i >= n ? (n > 1 ? 2 * n - 2 - i : 0) : i); }

/* A pixel's grey level c and Laplacian lap into the 32-bit sums. */
#define SUMS(c, lap) (cs += (c), csq += (c) * (c), cls += (lap), clsq += (lap) * (lap))

/* The grey's and its Laplacian's standard deviations: integer sums, exact. A row's two edge
   columns (reflected) first, then its runs of at most 1,024 pixels in 32 bits (a row of 2,100
   would overflow the squared Laplacian's), with no branch in their loop. */
static void grey_stds(const uint8_t *g, int h, int w, double *gstd, double *lstd) {
    int64_t s = 0, sq = 0, ls = 0, lsq = 0;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = g + (size_t)y * w;
        const uint8_t *up = g + (size_t)reflect(y - 1, h) * w;
        const uint8_t *down = g + (size_t)reflect(y + 1, h) * w;
        int32_t cs = 0, csq = 0, cls = 0, clsq = 0;
        for (int x = 0; x < w; x += (w > 1 ? w - 1 : 1)) {
            int32_t c = row[x];
            int32_t lap = up[x] + down[x] + row[reflect(x - 1, w)] + row[reflect(x + 1, w)] - 4 * c;
            SUMS(c, lap);
        }
        for (int x0 = 1; x0 < w - 1 || x0 == 1; x0 += 1024) {  /* (once, to add the edges) */
            int x1 = x0 + 1024 < w - 1 ? x0 + 1024 : w - 1;
            for (int x = x0; x < x1; x++) {
                int32_t c = row[x], lap = up[x] + down[x] + row[x - 1] + row[x + 1] - 4 * c;
                SUMS(c, lap);
            }
            s += cs;
            sq += csq;
            ls += cls;
            lsq += clsq;
            cs = csq = cls = clsq = 0;
        }
    }
    double n = (double)h * w;
    *gstd = std_of((double)s, (double)sq, n);
    *lstd = std_of((double)ls, (double)lsq, n);
}

/* The k-th smallest of a[0..n) (reorders a). */
static double kth(double *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = a[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                double t = a[i]; a[i] = a[j]; a[j] = t;
                i++; j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

/* information(): the thumbnail's k x k block means (as sums: whole numbers), their 1st and 99th
   percentiles stretched to 0-255 (at most STRETCH times) and rounded, the entropy of the
   256-bin histogram. -1 where memory runs out. */
static double thumb_entropy(const uint8_t *g, int h, int w) {
    int k = (h < w ? h : w) / 32;
    if (k < 1) k = 1;
    int th = h / k, tw = w / k, n = th * tw, most = 255 * k * k;
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)n), *count = calloc((size_t)most + 1, sizeof(int32_t));
    if (!sums || !count) { free(sums); free(count); return -1; }
    int32_t *cols = malloc(sizeof(int32_t) * (size_t)tw * k);
    if (!cols) { free(sums); free(count); return -1; }
    for (int ty = 0; ty < th; ty++) {  /* a block row's column sums, then k columns a block */
        memset(cols, 0, sizeof(int32_t) * (size_t)tw * k);
        for (int y = ty * k; y < ty * k + k; y++)
            for (int x = 0; x < tw * k; x++) cols[x] += g[(size_t)y * w + x];
        for (int tx = 0; tx < tw; tx++) {
            int32_t t = 0;
            for (int x = tx * k; x < tx * k + k; x++) t += cols[x];
            sums[ty * tw + tx] = t;
            count[t]++;
        }
    }
    free(cols);
    int k1 = (int)(0.01 * (n - 1)), k99 = (int)(0.99 * (n - 1)), seen = 0, lo = -1, hi = -1;
    for (int v = 0; v <= most && hi < 0; v++) {  /* the ranks' values, by a counting sort */
        seen += count[v];
        if (lo < 0 && seen > k1) lo = v;
        if (seen > k99) hi = v;
    }
    double area = (double)k * k, flo = lo / area, span = (hi - lo) / area;
    double gain = 255.0 / (span > 255.0 / STRETCH ? span : 255.0 / STRETCH);
    int32_t levels[256] = {0};
    for (int i = 0; i < n; i++) {
        double v = sums[i] / area;
        double s = nearbyint(((v > flo ? v : flo) - flo) * gain);  /* half to even, as cvRound */
        levels[s > 255 ? 255 : (int)s]++;
    }
    free(sums);
    free(count);
    double acc = 0;
    for (int i = 0; i < 256; i++)
        if (levels[i] > 1) acc += levels[i] * log2((double)levels[i]);
    double bits = log2((double)n) - acc / n;
    return bits > 0 ? bits : 0.0;
}

static int as_u8(PyObject *o, Py_buffer *b, int ndim_lo, int ndim_hi) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) return -1;
    if (b->ndim < ndim_lo || b->ndim > ndim_hi || b->itemsize != 1 ||
        (b->format && strcmp(b->format, "B") != 0) || b->shape[0] < 1 || b->shape[1] < 1) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_ValueError, "expected a C-contiguous uint8 array");
        return -1;
    }
    return 0;
}

/* The sample: cv::resize(small, (w / step, h / step), INTER_NEAREST)'s pixels, into out. */
static void nearest(const uint8_t *img, int h, int w, int ch, int dh, int dw, uint8_t *out) {
    double ify = 1.0 / ((double)dh / h), ifx = 1.0 / ((double)dw / w);
    for (int y = 0; y < dh; y++) {
        int sy = (int)floor(y * ify);
        sy = sy < h - 1 ? sy : h - 1;
        for (int x = 0; x < dw; x++) {
            int sx = (int)floor(x * ifx);
            sx = sx < w - 1 ? sx : w - 1;
            memcpy(out + ((size_t)y * dw + x) * ch, img + ((size_t)sy * w + sx) * ch, (size_t)ch);
        }
    }
}

/* The sample's n pixels of ch channels: each channel's sum and sum of squares, the mean max - min
   channel (chroma), the brightness at the 99th and 5th percentiles (b2: n values of room). */
static void sample_stats(const uint8_t *sample, int n, int ch, double *b2, double *sum, double *sq,
                         double *chroma, double *p99, double *p5) {
    int64_t spread = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t *p = sample + (size_t)i * ch;
        if (ch == 3) {
            int r = p[0], gg = p[1], bl = p[2];
            int mx = r > gg ? (r > bl ? r : bl) : (gg > bl ? gg : bl);
            int mn = r < gg ? (r < bl ? r : bl) : (gg < bl ? gg : bl);
            spread += mx - mn;
            b2[i] = 0.241 * r * r + 0.691 * gg * gg + 0.068 * bl * bl;
        } else {
            b2[i] = (double)p[0] * p[0];
        }
        for (int c = 0; c < ch; c++) {
            sum[c] += p[c];
            sq[c] += (double)p[c] * p[c];
        }
    }
    *chroma = (double)spread / n;
    *p99 = sqrt(kth(b2, n, (int)(0.99 * (n - 1)))) / 255.0;
    *p5 = sqrt(kth(b2, n, (int)(0.05 * (n - 1)))) / 255.0;
}

static PyObject *stats(PyObject *self, PyObject *args) {
    PyObject *so, *go;
    Py_buffer sb, gb;
    int side;
    if (!PyArg_ParseTuple(args, "OOi", &so, &go, &side)) return NULL;
    if (as_u8(so, &sb, 2, 3) < 0) return NULL;
    if (as_u8(go, &gb, 2, 2) < 0) { PyBuffer_Release(&sb); return NULL; }
    int h = (int)sb.shape[0], w = (int)sb.shape[1], ch = sb.ndim == 3 ? (int)sb.shape[2] : 1;
    if ((ch != 1 && ch != 3) || gb.shape[0] != h || gb.shape[1] != w) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&gb);
        PyErr_SetString(PyExc_ValueError, "expected 1 or 3 channels and a grey of their size");
        return NULL;
    }
    int step = (h < w ? h : w) / (side > 0 ? side : 1);
    step = step > 1 ? step : 1;
    int dh = h / step, dw = w / step, n = dh * dw;
    uint8_t *sample = malloc((size_t)n * ch + 1);
    double *b2 = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double gstd = 0, lstd = 0, bits = 0, chroma = 0, sum[3] = {0}, sq[3] = {0}, p99 = 0, p5 = 0;
    if (!sample || !b2 || n < 1) {
        free(sample); free(b2);
        PyBuffer_Release(&sb);
        PyBuffer_Release(&gb);
        return n < 1 ? (PyErr_SetString(PyExc_ValueError, "image too small"), NULL) : PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *g = gb.buf;
    grey_stds(g, h, w, &gstd, &lstd);
    bits = thumb_entropy(g, h, w);
    nearest(sb.buf, h, w, ch, dh, dw, sample);
    sample_stats(sample, n, ch, b2, sum, sq, &chroma, &p99, &p5);
    Py_END_ALLOW_THREADS
    free(sample); free(b2);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&gb);
    if (bits < 0) return PyErr_NoMemory();
    double m[3], d[3];
    for (int c = 0; c < 3; c++) {
        int cc = ch == 3 ? c : 0;
        m[c] = sum[cc] / n;
        d[c] = std_of(sum[cc], sq[cc], n);
    }
    return Py_BuildValue("(dddddddddddd)", gstd, lstd, p99, p5, bits, chroma, m[0], m[1], m[2],
                         d[0], d[1], d[2]);
}

static PyMethodDef methods[] = {
    {"stats", stats, METH_VARARGS, "The quality scores' statistics of a grey copy and a sample."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_quality", NULL, -1, methods};

PyMODINIT_FUNC PyInit__quality(void) { return PyModule_Create(&module); }
