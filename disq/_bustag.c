/* The tags of a bus link's frames (disq/cluster/session.py, FrameTags): AES-256-GCM
 * of no plaintext over a frame's payload (GMAC), the count of frames before it as the
 * nonce, through OpenSSL's libcrypto with the key set up once per link. The same tags
 * as session.py's fallback over the cryptography package, whose every call builds a
 * cipher context and expands the key again: ~7,400 instructions a tag there, a few
 * hundred here, paid per frame each way on every link.
 *
 * Tags(key): .tag(data, start) -> the 16-byte tag of data[start:];
 *            .check(buf, start, end) -> whether buf[end:end+16] is the tag of
 *            buf[start:end]. Each call takes the next count. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#define TAG_LEN 16

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *ctx;
    unsigned long long count;
} Tags;

static void
Tags_dealloc(Tags *self)
{
    if (self->ctx) {
        EVP_CIPHER_CTX_free(self->ctx);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Tags_init(Tags *self, PyObject *args, PyObject *kwds)
{
    Py_buffer key;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "y*", &key)) {
        return -1;
    }
    int ok = key.len == 32;
    if (ok) {
        if (self->ctx == NULL) {
            self->ctx = EVP_CIPHER_CTX_new();
        }
        ok = self->ctx != NULL
             && EVP_EncryptInit_ex(self->ctx, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1
             && EVP_CIPHER_CTX_ctrl(self->ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) == 1
             && EVP_EncryptInit_ex(self->ctx, NULL, NULL, key.buf, NULL) == 1;
    }
    PyBuffer_Release(&key);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "a 32-byte key, and OpenSSL's AES-256-GCM");
        return -1;
    }
    self->count = 0;
    return 0;
}

/* The tag of data[0:len] under the next count, into out. */
static int
gmac(Tags *self, const unsigned char *data, Py_ssize_t len, unsigned char *out)
{
    unsigned char iv[12] = {0};
    unsigned long long count = self->count++;
    int outl;
    for (int i = 11; i >= 4; i--) { /* big-endian after 4 zero bytes, as session.py */
        iv[i] = (unsigned char)(count & 0xff);
        count >>= 8;
    }
    if (len > INT_MAX) {
        return 0;
    }
    return EVP_EncryptInit_ex(self->ctx, NULL, NULL, NULL, iv) == 1
           && (len == 0 || EVP_EncryptUpdate(self->ctx, NULL, &outl, data, (int)len) == 1)
           && EVP_EncryptFinal_ex(self->ctx, out, &outl) == 1
           && EVP_CIPHER_CTX_ctrl(self->ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, out) == 1;
}

static PyObject *
Tags_tag(Tags *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t start;
    unsigned char out[TAG_LEN];
    if (!PyArg_ParseTuple(args, "y*n", &data, &start)) {
        return NULL;
    }
    int ok = start >= 0 && start <= data.len
             && gmac(self, (const unsigned char *)data.buf + start, data.len - start, out);
    PyBuffer_Release(&data);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "could not tag the frame");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)out, TAG_LEN);
}

static PyObject *
Tags_check(Tags *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t start, end;
    unsigned char out[TAG_LEN];
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &start, &end)) {
        return NULL;
    }
    const unsigned char *p = buf.buf;
    int ok = start >= 0 && start <= end && end <= buf.len - TAG_LEN
             && gmac(self, p + start, end - start, out)
             && CRYPTO_memcmp(out, p + end, TAG_LEN) == 0;
    PyBuffer_Release(&buf);
    return PyBool_FromLong(ok);
}

static PyMethodDef Tags_methods[] = {
    {"tag", (PyCFunction)Tags_tag, METH_VARARGS,
     "tag(data, start): the tag of data[start:] (the next count)."},
    {"check", (PyCFunction)Tags_check, METH_VARARGS,
     "check(buf, start, end): whether buf[end:end+16] tags buf[start:end]."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TagsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disq._bustag.Tags",
    .tp_basicsize = sizeof(Tags),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tags_init,
    .tp_dealloc = (destructor)Tags_dealloc,
    .tp_methods = Tags_methods,
    .tp_doc = "The GMAC tags of one direction of a bus link.",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "disq._bustag", NULL, 0, NULL,
};

PyMODINIT_FUNC
PyInit__bustag(void)
{
    if (PyType_Ready(&TagsType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&TagsType);
    if (PyModule_AddObject(m, "Tags", (PyObject *)&TagsType) < 0) {
        Py_DECREF(&TagsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
