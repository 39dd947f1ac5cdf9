/* What a msgpack object would cost once decoded by msgpack-python, found without
 * decoding it, for disq/cluster/messages.py: a bus frame is refused from its bytes
 * alone when its objects would take too much memory (empty arrays: 1 byte each on
 * the wire, 64 in Python), before anything is built.
 *
 * cost(buffer, start, end, limit) walks the one object in buffer[start:end] (a frame's
 * payload) with a stack of its own (no recursion) and returns the bytes its Python
 * objects would take: a list 56 + 8 per item, a str 49 + its length (ASCII; 80 + its
 * length at most otherwise), bytes 33 + their length, an int beyond CPython's cached ones 32, a float 24; None, booleans, small
 * ints, empty and one-byte strings and bytes are shared objects (0). It stops as soon
 * as the sum passes `limit` and returns it then. Maps and ext types (the bus sends
 * none), nesting deeper than MAX_DEPTH, truncated data or bytes after the object
 * raise ValueError. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 512

static uint64_t
be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

static PyObject *
cost(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end;
    long long limit;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*nnL", &view, &start, &end, &limit)) {
        return NULL;
    }
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bounds outside the buffer");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf + start;
    const unsigned char *stop = (const unsigned char *)view.buf + end;
    uint64_t left[MAX_DEPTH]; /* items still to read in each open array */
    int depth = 0;
    long long total = 0;
    const char *error = NULL;
    uint64_t objects = 1; /* the top object */

    while (objects) {
        if (p >= stop) {
            error = "truncated";
            break;
        }
        unsigned char b = *p++;
        uint64_t n = 0;     /* array items, or str/bin length */
        int kind = 0;       /* 0 scalar, 1 array, 2 str, 3 bin */
        int width = 0;      /* bytes of the length or value after the type byte */
        long long scalar = 0;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            scalar = (b >= 0xe0 && (signed char)b < -5) ? 32 : 0;
        } else if (b >= 0x90 && b <= 0x9f) {
            kind = 1;
            n = b & 0x0f;
        } else if (b >= 0xa0 && b <= 0xbf) {
            kind = 2;
            n = b & 0x1f;
        } else {
            switch (b) {
            case 0xdc: kind = 1; width = 2; break;
            case 0xdd: kind = 1; width = 4; break;
            case 0xd9: kind = 2; width = 1; break;
            case 0xda: kind = 2; width = 2; break;
            case 0xdb: kind = 2; width = 4; break;
            case 0xc4: kind = 3; width = 1; break;
            case 0xc5: kind = 3; width = 2; break;
            case 0xc6: kind = 3; width = 4; break;
            case 0xcc: width = 1; break;                /* uint8: cached */
            case 0xd0: width = 1; scalar = -1; break;   /* int8 */
            case 0xcd: case 0xd1: width = 2; scalar = 32; break;
            case 0xce: case 0xd2: case 0xca: width = 4; scalar = 32; break;
            case 0xcf: case 0xd3: case 0xcb: width = 8; scalar = 32; break;
            default:
                error = (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf
                        ? "a map" : "an ext type or unused byte";
            }
            if (error) {
                break;
            }
            if (stop - p < width) {
                error = "truncated";
                break;
            }
            if (kind) {
                n = be(p, width);
            } else if (scalar < 0) {
                scalar = (signed char)*p < -5 ? 32 : 0;
            }
            p += width;
        }
        objects--;
        if (kind == 1) {
            total += 56 + 8 * (long long)n;
            if (n > (uint64_t)(stop - p)) {  /* each item takes a byte at least */
                error = "truncated";
                break;
            }
            if (n) {
                if (depth == MAX_DEPTH) {
                    error = "nested too deep";
                    break;
                }
                left[depth++] = objects; /* what the enclosing array still has */
                objects = n;
            }
        } else if (kind) {
            if (n > (uint64_t)(stop - p)) {
                error = "truncated";
                break;
            }
            if (n >= 2) {
                long long head = 33; /* bytes */
                if (kind == 2) {     /* str: 49 if ASCII, at most 80 (UCS-2/4) */
                    head = 49;
                    for (uint64_t i = 0; i < n; i++) {
                        if (p[i] & 0x80) {
                            head = 80;
                            break;
                        }
                    }
                }
                total += head + (long long)n;
            }
            p += n;
        } else {
            total += scalar;
        }
        if (total > limit) {
            break;
        }
        while (!objects && depth) {
            objects = left[--depth];
        }
    }
    PyBuffer_Release(&view);
    if (error) {
        PyErr_Format(PyExc_ValueError, "msgpack: %s", error);
        return NULL;
    }
    if (total <= limit && p != stop) {
        PyErr_SetString(PyExc_ValueError, "msgpack: extra bytes after its object");
        return NULL;
    }
    return PyLong_FromLongLong(total);
}

static PyMethodDef methods[] = {
    {"cost", cost, METH_VARARGS,
     "cost(buffer, start, end, limit): the bytes the msgpack object in "
     "buffer[start:end] would take once decoded (stops past limit)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "disq._msgcost", NULL, 0, methods,
};

PyMODINIT_FUNC
PyInit__msgcost(void)
{
    return PyModule_Create(&module);
}
