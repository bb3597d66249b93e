/* loaders._jpegroi: decode one box of a JPEG, not the whole image.
 *
 * libjpeg-turbo's jpeg_crop_scanline() limits the inverse DCT, upsampling and colour conversion
 * to the box's columns (rounded out to whole iMCUs), jpeg_skip_scanlines() passes the rows above
 * it without reconstructing them, and decoding stops after its last row: a random-resized crop
 * of a quarter of the image costs a fraction of a whole decode. The pixels are those of a whole
 * decode, sliced (tests/test_jpeg.py compares them). Built by setup.py where a C compiler and
 * libjpeg-turbo's headers are present; without it loaders.decode decodes whole images.
 *
 * decode_box(data, out, height, width, top, left, rows, cols, denom, channels, fast=False)
 *   data: the JPEG bytes; out: a writable C-contiguous buffer of rows * cols * channels bytes;
 *   (height, width): the image's size at scale 1/denom (checked); the box: rows [top, top +
 *   rows), columns [left, left + cols) at that scale; denom: 1, 2, 4 or 8; channels: 1 or 3;
 *   fast: the fast integer inverse DCT (JDCT_IFAST) and plain chroma upsampling, as
 *   simplejpeg's fastdct and fastupsample (slightly less accurate pixels).
 *   Corrupt data, warnings included (a truncated stream), raise ValueError. The GIL is released
 *   while decoding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#ifndef LIBJPEG_TURBO_VERSION
#error "loaders._jpegroi needs libjpeg-turbo (jpeg_crop_scanline, jpeg_skip_scanlines)"
#endif

#define MARGIN 16 /* px: an iMCU of 4:2:0 chroma at full scale */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} Errors;

static void on_error(j_common_ptr cinfo) {
    Errors *errors = (Errors *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, errors->message);
    longjmp(errors->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) { /* a warning: corrupt or truncated data, refused as an error */
        on_error(cinfo);
    }
}

typedef struct {
    const unsigned char *data;
    size_t size;
    unsigned char *out;
    int height, width, top, left, rows, cols, denom, channels, fast;
} Job;

/* The decode itself, without the GIL: 0, or -1 with errors->message set. */
static int decode(const Job *job, Errors *errors) {
    struct jpeg_decompress_struct cinfo;
    unsigned char *volatile block = NULL; /* the row pointers, then the box's rows */
    int failed = 0;

    memset(&cinfo, 0, sizeof cinfo); /* so that a failed create leaves nothing to destroy */
    cinfo.err = jpeg_std_error(&errors->pub);
    errors->pub.error_exit = on_error;
    errors->pub.emit_message = on_message;
    if (setjmp(errors->jump)) {
        failed = 1;
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, job->data, (unsigned long)job->size);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = job->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)job->denom;
    if (job->fast) {
        cinfo.dct_method = JDCT_IFAST;
        cinfo.do_fancy_upsampling = FALSE;
    }
    jpeg_start_decompress(&cinfo);
    if ((int)cinfo.output_height != job->height || (int)cinfo.output_width != job->width ||
        cinfo.output_components != job->channels) {
        snprintf(errors->message, JMSG_LENGTH_MAX, "decoded %ux%u with %d channels, stored %dx%d",
                 cinfo.output_width, cinfo.output_height, cinfo.output_components, job->width,
                 job->height);
        failed = 1;
        goto done;
    }
    /* A margin of MARGIN px around the box, where the image has them: fancy upsampling of the
     * chroma reads a neighbour beyond a cropped edge, which a crop replicates instead. */
    int x0 = job->left > MARGIN ? job->left - MARGIN : 0;
    int x1 = job->left + job->cols + MARGIN < job->width ? job->left + job->cols + MARGIN
                                                          : job->width;
    JDIMENSION x = (JDIMENSION)x0, span = (JDIMENSION)(x1 - x0);
    jpeg_crop_scanline(&cinfo, &x, &span); /* widened to whole iMCUs: x <= x0 */
    /* All the box's rows at once, as libjpeg's own callers read: a row per call costs each
     * call a pass through its buffering (half again the time of the whole decode). */
    size_t pitch = (size_t)span * job->channels;
    block = malloc(pitch * job->rows + sizeof(JSAMPROW) * job->rows);
    if (block == NULL) {
        snprintf(errors->message, JMSG_LENGTH_MAX, "out of memory");
        failed = 1;
        goto done;
    }
    JSAMPARRAY lines = (JSAMPARRAY)block; /* first: malloc aligns it for pointers */
    unsigned char *pixels = block + sizeof(JSAMPROW) * job->rows;
    for (int r = 0; r < job->rows; r++) {
        lines[r] = pixels + pitch * r;
    }
    if (job->top > 0) {
        jpeg_skip_scanlines(&cinfo, (JDIMENSION)job->top);
    }
    for (int r = 0; r < job->rows;) {
        JDIMENSION got = jpeg_read_scanlines(&cinfo, lines + r, (JDIMENSION)(job->rows - r));
        if (got == 0) {
            snprintf(errors->message, JMSG_LENGTH_MAX, "the stream ends at row %d", job->top + r);
            failed = 1;
            goto done;
        }
        r += (int)got;
    }
    size_t row = (size_t)job->cols * job->channels, skip = (size_t)(job->left - x) * job->channels;
    for (int r = 0; r < job->rows; r++) {
        memcpy(job->out + r * row, lines[r] + skip, row);
    }
done:
    free(block);
    jpeg_destroy_decompress(&cinfo); /* the rows below the box are never decoded */
    return failed ? -1 : 0;
}

static PyObject *decode_box(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    Job job;
    Errors errors;
    (void)self;
    job.fast = 0;
    if (!PyArg_ParseTuple(args, "y*w*iiiiiiii|p", &data, &out, &job.height, &job.width, &job.top,
                          &job.left, &job.rows, &job.cols, &job.denom, &job.channels, &job.fast)) {
        return NULL;
    }
    const char *bad = NULL;
    if (job.channels != 1 && job.channels != 3) {
        bad = "channels must be 1 or 3";
    } else if (job.denom != 1 && job.denom != 2 && job.denom != 4 && job.denom != 8) {
        bad = "denom must be 1, 2, 4 or 8";
    } else if (job.rows < 1 || job.cols < 1 || job.top < 0 || job.left < 0 ||
               job.top > job.height - job.rows || job.left > job.width - job.cols) {
        /* compared without a sum: top + rows could overflow an int */
        bad = "the box must lie inside the image";
    } else if (!PyBuffer_IsContiguous(&out, 'C') ||
               out.len != (Py_ssize_t)job.rows * job.cols * job.channels) {
        bad = "out must be C-contiguous, rows * cols * channels bytes";
    }
    if (bad != NULL) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    job.data = data.buf;
    job.size = (size_t)data.len;
    job.out = out.buf;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = decode(&job, &errors);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (status != 0) {
        PyErr_SetString(PyExc_ValueError, errors.message);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_box", decode_box, METH_VARARGS,
     "decode_box(data, out, height, width, top, left, rows, cols, denom, channels, fast=False): "
     "one box of a JPEG at scale 1/denom into out (rows * cols * channels bytes); fast: the "
     "fast integer IDCT and plain upsampling."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegroi", "Decode one box of a JPEG (libjpeg-turbo).", -1, methods,
};

PyMODINIT_FUNC PyInit__jpegroi(void) { return PyModule_Create(&module); }
