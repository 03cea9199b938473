/* A fake CUDA driver (libcuda) for host tests of spio.cuda: no GPU, deterministic answers.
 *
 * It exports the entry points spio binds, with the real signatures and cuda.h enum values, and
 * answers as one "NVIDIA H100 80GB HBM3" (device 0) plus a second device. It records what the
 * binding passes (launch geometry, the packed kernel parameters, unloads) and whether the
 * calling thread held the Python GIL, so tests can check the binding's rules. The fake_* exports
 * are read by the tests through ctypes. Build: cc -shared -fPIC -o libfake.so fake_libcuda.c
 * (-DOMIT_LAUNCH leaves out cuLaunchKernel, to test a driver that lacks a symbol).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;

enum { OK = 0, INVALID_VALUE = 1, INVALID_DEVICE = 101, INVALID_IMAGE = 200,
       INVALID_CONTEXT = 201, NOT_FOUND = 500 };

static int init_status = 0;
static int gil_held_calls = 0;
static int loads = 0, unloads = 0, unload_in_module_ctx = 0;
static char signature[256];
static unsigned last_dims[6];
static unsigned last_smem;
static unsigned long long last_stream;
static unsigned char last_params[4096];
static int last_params_size;
static int dyn_smem_limit = 232448;
static int last_ex = 0;            /* 1: the last launch came through cuLaunchKernelEx */
static int last_attr_count = 0;
static int last_attr_ids[8], last_attr_values[8];
static __thread CUcontext current = 0, pushed_from = 0;
static char contexts[2];  /* primary context of device d is &contexts[d] */

typedef struct { CUcontext ctx; } Module;
typedef struct { Module* module; char name[64]; } Function;

/* Rule 4 of the binding: every driver call is made with the GIL released. */
static void note_gil(void) {
    static int (*check)(void) = 0;
    if (!check) check = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
    if (check && check()) gil_held_calls++;
}

void fake_set_init_status(int s) { init_status = s; }
void fake_clear_current(void) { current = 0; pushed_from = 0; }
int fake_gil_held_calls(void) { return gil_held_calls; }
int fake_loads(void) { return loads; }
int fake_unloads(void) { return unloads; }
int fake_unload_in_module_ctx(void) { return unload_in_module_ctx; }
void fake_set_signature(const char* s) { strncpy(signature, s, sizeof signature - 1); }
void fake_last_launch(unsigned* dims, unsigned* smem, unsigned long long* stream) {
    memcpy(dims, last_dims, sizeof last_dims); *smem = last_smem; *stream = last_stream;
}
/* How the last launch was made: returns 1 for cuLaunchKernelEx (its attributes' ids and the
 * int at the start of each value are copied out, *count set), 0 for cuLaunchKernel. */
int fake_last_launch_ex(int* count, int* ids, int* values) {
    *count = last_ex ? last_attr_count : 0;
    memcpy(ids, last_attr_ids, sizeof last_attr_ids);
    memcpy(values, last_attr_values, sizeof last_attr_values);
    return last_ex;
}
int fake_last_params(unsigned char* out) {
    memcpy(out, last_params, last_params_size); return last_params_size;
}

CUresult cuInit(unsigned flags) { note_gil(); return flags ? INVALID_VALUE : init_status; }
CUresult cuDriverGetVersion(int* v) { note_gil(); *v = 12040; return OK; }

CUresult cuGetErrorName(CUresult s, const char** out) {
    switch (s) {
        case 1: *out = "CUDA_ERROR_INVALID_VALUE"; return OK;
        case 34: *out = "CUDA_ERROR_STUB_LIBRARY"; return OK;
        case 100: *out = "CUDA_ERROR_NO_DEVICE"; return OK;
        case 101: *out = "CUDA_ERROR_INVALID_DEVICE"; return OK;
        case 200: *out = "CUDA_ERROR_INVALID_IMAGE"; return OK;
        case 201: *out = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
        case 500: *out = "CUDA_ERROR_NOT_FOUND"; return OK;
        default: *out = 0; return INVALID_VALUE;
    }
}
CUresult cuGetErrorString(CUresult s, const char** out) {
    const char* name;
    if (cuGetErrorName(s, &name) != OK) { *out = 0; return INVALID_VALUE; }
    *out = "fake driver error text";
    return OK;
}

CUresult cuDeviceGetCount(int* n) { note_gil(); if (init_status) return init_status; *n = 2; return OK; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    note_gil();
    if (ordinal < 0 || ordinal > 1) return INVALID_DEVICE;
    *d = ordinal; return OK;
}
CUresult cuDeviceGetName(char* buf, int len, CUdevice d) {
    note_gil(); strncpy(buf, d == 0 ? "NVIDIA H100 80GB HBM3" : "Fake GPU", len); return OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice d) {
    note_gil();
    (void)d;
    switch (attr) {  /* values of an H100 SXM; attribute numbers from cuda.h */
        case 1: *v = 1024; return OK;         /* MAX_THREADS_PER_BLOCK */
        case 8: *v = 49152; return OK;        /* MAX_SHARED_MEMORY_PER_BLOCK */
        case 10: *v = 32; return OK;          /* WARP_SIZE */
        case 12: *v = 65536; return OK;       /* MAX_REGISTERS_PER_BLOCK */
        case 13: *v = 1980000; return OK;     /* CLOCK_RATE */
        case 16: *v = 132; return OK;         /* MULTIPROCESSOR_COUNT */
        case 36: *v = 2619000; return OK;     /* MEMORY_CLOCK_RATE */
        case 37: *v = 5120; return OK;        /* GLOBAL_MEMORY_BUS_WIDTH */
        case 38: *v = 52428800; return OK;    /* L2_CACHE_SIZE */
        case 39: *v = 2048; return OK;        /* MAX_THREADS_PER_MULTIPROCESSOR */
        case 75: *v = 9; return OK;           /* COMPUTE_CAPABILITY_MAJOR */
        case 76: *v = 0; return OK;           /* COMPUTE_CAPABILITY_MINOR */
        case 81: *v = 233472; return OK;      /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
        case 82: *v = 65536; return OK;       /* MAX_REGISTERS_PER_MULTIPROCESSOR */
        case 97: *v = 232448; return OK;      /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
        default: return INVALID_VALUE;
    }
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
    note_gil(); (void)d; *bytes = 85520809984ull; return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { note_gil(); *c = &contexts[d]; return OK; }
CUresult cuCtxGetCurrent(CUcontext* c) { note_gil(); *c = current; return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { note_gil(); current = c; return OK; }
CUresult cuCtxGetDevice(CUdevice* d) {
    note_gil();
    if (!current) return INVALID_CONTEXT;
    *d = (int)((char*)current - contexts); return OK;
}
CUresult cuCtxPushCurrent_v2(CUcontext c) { note_gil(); pushed_from = current; current = c; return OK; }
CUresult cuCtxPopCurrent_v2(CUcontext* c) { note_gil(); *c = current; current = pushed_from; return OK; }
CUresult cuCtxSynchronize(void) { note_gil(); return current ? OK : INVALID_CONTEXT; }
CUresult cuStreamSynchronize(void* s) { note_gil(); (void)s; return OK; }

CUresult cuModuleLoadData(void** m, const void* image) {
    note_gil();
    if (!current) return INVALID_CONTEXT;
    if (memcmp(image, "\x7f" "ELF", 4) != 0) return INVALID_IMAGE;
    Module* mod = malloc(sizeof *mod);
    mod->ctx = current;
    *m = mod; loads++; return OK;
}
CUresult cuModuleUnload(void* m) {
    note_gil();
    Module* mod = m;
    if (mod->ctx == current) unload_in_module_ctx++;
    free(mod); unloads++; return OK;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    note_gil();
    if (strcmp(name, "missing") == 0) return NOT_FOUND;
    Function* fn = malloc(sizeof *fn);  /* leaked: a test process loads a handful */
    fn->module = m; strncpy(fn->name, name, sizeof fn->name - 1);
    *f = fn; return OK;
}
CUresult cuFuncGetAttribute(int* v, int attr, void* f) {
    note_gil(); (void)f;
    switch (attr) {
        case 0: *v = 1024; return OK;  /* MAX_THREADS_PER_BLOCK */
        case 1: *v = 0; return OK;     /* SHARED_SIZE_BYTES */
        case 3: *v = 0; return OK;     /* LOCAL_SIZE_BYTES */
        case 4: *v = 32; return OK;    /* NUM_REGS */
        case 6: *v = 90; return OK;    /* BINARY_VERSION */
        default: return INVALID_VALUE;
    }
}
CUresult cuFuncSetAttribute(void* f, int attr, int value) {
    note_gil(); (void)f;
    if (attr != 8 || value > dyn_smem_limit) return INVALID_VALUE;
    return OK;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void* f, int threads, size_t smem) {
    note_gil(); (void)f;
    int by_threads = 2048 / threads, by_smem = smem ? (int)(233472 / smem) : 32;
    *n = by_threads < by_smem ? by_threads : by_smem;
    return OK;
}

/* The launch both entry points make: checks, then records geometry and parameters. */
static CUresult record_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned smem, void* stream,
                              void** params, void** extra) {
    Function* fn = f;
    if (!current) return INVALID_CONTEXT;
    if (fn->module->ctx != current) return INVALID_CONTEXT;
    if ((unsigned long long)bx * by * bz > 1024 || extra) return INVALID_VALUE;
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    memcpy(last_dims, dims, sizeof dims);
    last_smem = smem;
    last_stream = (unsigned long long)stream;
    last_params_size = 0;
    for (int i = 0; signature[i]; i++) {
        int size = (signature[i] == 'i' || signature[i] == 'f') ? 4
                   : signature[i] == 't' ? 128 : 8;
        memcpy(last_params + last_params_size, params[i], size);
        last_params_size += size;
    }
    return OK;
}

#ifndef OMIT_LAUNCH
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void* stream, void** params, void** extra) {
    note_gil();
    last_ex = 0;
    return record_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra);
}
#endif

/* cuda.h's layouts (CUDA 12/13, 64-bit): a 72-byte attribute (id, padding, 64-byte union) and
 * the 56-byte launch config. */
typedef struct { int id; char pad[4]; union { char bytes[64]; int i; void* p; } value; } Attr;
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, smem;
    void* stream;
    Attr* attrs;
    unsigned num_attrs;
} LaunchConfig;

CUresult cuLaunchKernelEx(const LaunchConfig* config, void* f, void** params, void** extra) {
    note_gil();
    _Static_assert(sizeof(Attr) == 72 && sizeof(LaunchConfig) == 56, "cuda.h layouts");
    if (!config || config->num_attrs > 8 || (config->num_attrs && !config->attrs)) {
        return INVALID_VALUE;
    }
    for (unsigned i = 0; i < config->num_attrs; i++) {
        if (config->attrs[i].id == 6 && config->attrs[i].value.i != 0 &&
            config->attrs[i].value.i != 1) {
            return INVALID_VALUE;  /* PROGRAMMATIC_STREAM_SERIALIZATION takes 0 or 1 */
        }
        last_attr_ids[i] = config->attrs[i].id;
        last_attr_values[i] = config->attrs[i].value.i;
    }
    last_attr_count = (int)config->num_attrs;
    last_ex = 1;
    return record_launch(f, config->gx, config->gy, config->gz, config->bx, config->by,
                         config->bz, config->smem, config->stream, params, extra);
}

/* cuTensorMapEncodeTiled: checks what the driver documents (64-byte aligned output, rank 1-5,
 * 16-byte aligned address, strides multiples of 16, boxes 1-256), then writes a descriptor that
 * spells out its arguments: quadword 0 the address, 1 (data type | rank << 8 | interleave << 16 |
 * swizzle << 24 | l2 << 32 | oob << 40), 2-6 the dims, 7-10 the strides, 11-15 box | estride << 16
 * (each innermost first), so a test can read back what the binding passed. */
CUresult cuTensorMapEncodeTiled(void* map, int dtype, unsigned rank, void* address,
                                const unsigned long long* dims, const unsigned long long* strides,
                                const unsigned* box, const unsigned* estrides, int interleave,
                                int swizzle, int l2, int oob) {
    note_gil();
    if (!map || ((unsigned long long)map & 63) || rank < 1 || rank > 5 || dtype < 0 || dtype > 12)
        return INVALID_VALUE;
    if ((unsigned long long)address & 15) return INVALID_VALUE;
    unsigned long long q[16] = {0};
    q[0] = (unsigned long long)address;
    q[1] = (unsigned long long)dtype | (unsigned long long)rank << 8 |
           (unsigned long long)interleave << 16 | (unsigned long long)swizzle << 24 |
           (unsigned long long)l2 << 32 | (unsigned long long)oob << 40;
    for (unsigned i = 0; i < rank; i++) {
        if (dims[i] == 0 || box[i] == 0 || box[i] > 256 || estrides[i] == 0) return INVALID_VALUE;
        q[2 + i] = dims[i];
        q[11 + i] = box[i] | (unsigned long long)estrides[i] << 16;
    }
    for (unsigned i = 0; i + 1 < rank; i++) {
        if (strides[i] % 16) return INVALID_VALUE;
        q[7 + i] = strides[i];
    }
    memcpy(map, q, sizeof q);
    return OK;
}
