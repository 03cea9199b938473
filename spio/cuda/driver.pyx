# cython: language_level=3
"""Thin binding of the CUDA Driver API: the library, devices and contexts.

1. Only the functions spio uses are bound.   2. Nonzero CUresult raises CudaDriverError.
3. Out-parameters are returned as values.   4. The GIL is released around every driver call.

libcuda is opened with dlopen at first use (name or path from `settings().libcuda`, default
`libcuda.so.1`), never at import and never at link time: building needs no CUDA toolkit and
importing needs no driver. A missing library raises LibraryNotFoundError, since nothing was called
and there is no CUresult to report; a driver that loads but fails cuInit raises CudaDriverError.

Handles (contexts) cross into Python as ints. Modules, functions and launches live in
`spio.cuda.module`. Policy-free: no caching of kernels, no heuristics, no torch.
"""

import enum
import threading

from libc.stdint cimport uintptr_t
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym

from spio.errors import CudaDriverError, LibraryNotFoundError
from spio.settings import settings

# Exported names in the order of the DriverFns members; versioned names (_v2) where the driver
# API versions the entry point, since the unversioned export keeps the old ABI.
_SYMBOLS = (
    b"cuInit", b"cuDriverGetVersion", b"cuGetErrorName", b"cuGetErrorString",
    b"cuDeviceGetCount", b"cuDeviceGet", b"cuDeviceGetName", b"cuDeviceGetAttribute",
    b"cuDeviceTotalMem_v2", b"cuDevicePrimaryCtxRetain", b"cuCtxGetCurrent", b"cuCtxSetCurrent",
    b"cuCtxGetDevice", b"cuCtxPushCurrent_v2", b"cuCtxPopCurrent_v2", b"cuCtxSynchronize",
    b"cuStreamSynchronize", b"cuModuleLoadData", b"cuModuleUnload", b"cuModuleGetFunction",
    b"cuFuncGetAttribute", b"cuFuncSetAttribute", b"cuOccupancyMaxActiveBlocksPerMultiprocessor",
    b"cuLaunchKernel", b"cuLaunchKernelEx", b"cuTensorMapEncodeTiled",
)

# CUresults meaning "no usable GPU here" rather than a failure (spio info reports 0 devices).
CUDA_ERROR_STUB_LIBRARY = 34
CUDA_ERROR_NO_DEVICE = 100


class DeviceAttribute(enum.IntEnum):
    """CUdevice_attribute values (cuda.h) that spio reads."""

    MAX_THREADS_PER_BLOCK = 1
    MAX_SHARED_MEMORY_PER_BLOCK = 8
    WARP_SIZE = 10
    MAX_REGISTERS_PER_BLOCK = 12
    CLOCK_RATE = 13
    MULTIPROCESSOR_COUNT = 16
    MEMORY_CLOCK_RATE = 36
    GLOBAL_MEMORY_BUS_WIDTH = 37
    L2_CACHE_SIZE = 38
    MAX_THREADS_PER_MULTIPROCESSOR = 39
    COMPUTE_CAPABILITY_MAJOR = 75
    COMPUTE_CAPABILITY_MINOR = 76
    MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
    MAX_REGISTERS_PER_MULTIPROCESSOR = 82
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
    MAX_BLOCKS_PER_MULTIPROCESSOR = 106


cdef DriverFns _fns
cdef void* _lib = NULL
cdef bint _ready = False          # symbols loaded and cuInit succeeded
cdef unsigned long _generation = 0
cdef CUcontext[64] _primary       # retained primary context per device ordinal (NULL: not yet)
_lock = threading.Lock()


cdef unsigned long generation() noexcept:
    return _generation


cdef DriverFns* fns() except NULL:
    if not _ready:
        _load()
    return &_fns


cdef DriverFns* loaded_fns() noexcept:
    return &_fns if _ready else NULL


def _load():
    """Opens libcuda, fills the symbol table and runs cuInit(0), once per process."""
    global _fns, _lib, _ready, _generation
    cdef DriverFns loaded
    cdef void** table = <void**>&loaded
    cdef void* handle
    cdef void* sym
    cdef CUresult status
    with _lock:
        if _ready:
            return
        if sizeof(DriverFns) != len(_SYMBOLS) * sizeof(void*):
            raise RuntimeError("spio.cuda.driver: _SYMBOLS does not match DriverFns; rebuild spio")
        if sizeof(CUlaunchAttribute) != 72 or sizeof(CUlaunchConfig) != 56:
            raise RuntimeError(
                "spio.cuda.driver: CUlaunchAttribute/CUlaunchConfig do not have cuda.h's sizes "
                "(72 and 56 bytes) on this platform; spio's binding supports 64-bit Linux only"
            )
        name = settings().libcuda
        handle = dlopen(name.encode(), RTLD_NOW | RTLD_LOCAL)
        if handle == NULL:
            reason = (<bytes>dlerror()).decode(errors="replace")
            raise LibraryNotFoundError(
                "the CUDA driver library (libcuda)", [f"dlopen({name!r}): {reason}"],
                "Install the NVIDIA driver, or set SPIO_LIBCUDA to the path of libcuda.so.1. "
                "Without a GPU, spio can still compile kernels but cannot run them.",
            )
        for i, symbol in enumerate(_SYMBOLS):
            sym = dlsym(handle, <const char*>symbol)
            if sym == NULL:
                raise LibraryNotFoundError(
                    f"the driver entry point {symbol.decode()}", [name],
                    "The NVIDIA driver is too old for spio; install driver 525 or newer.",
                )
            table[i] = sym
        # Only a complete table replaces the current one (a failed load leaves it as it was).
        _fns = loaded
        _lib = handle
        _generation += 1
        for i in range(64):
            _primary[i] = NULL
        with nogil:
            status = _fns.cuInit(0)
        check(status, "cuInit")
        _ready = True


def _reset():
    """Tests only: forget the loaded library, so the next use loads settings().libcuda again.

    The library stays mapped (it is never dlclosed); modules loaded before keep working but are
    not unloaded through the new table (see `generation`).
    """
    global _ready
    with _lock:
        _ready = False


def is_loaded():
    """True when libcuda has been opened and initialized in this process."""
    return _ready


cdef str _text(const char* s):
    return (<bytes>s).decode(errors="replace") if s != NULL else ""


cdef int check(CUresult status, str call) except -1:
    cdef const char* name = NULL
    cdef const char* message = NULL
    if status == 0:
        return 0
    if _lib != NULL:
        with nogil:
            if _fns.cuGetErrorName(status, &name) != 0:
                name = NULL
            if _fns.cuGetErrorString(status, &message) != 0:
                message = NULL
    raise CudaDriverError(
        status, _text(name) or f"CUresult {status}", _text(message) or "unknown error", call
    )


def driver_get_version():
    """cuDriverGetVersion: the CUDA version the driver supports, e.g. 12040 for 12.4."""
    cdef DriverFns* f = fns()
    cdef int version = 0
    cdef CUresult status
    with nogil:
        status = f.cuDriverGetVersion(&version)
    check(status, "cuDriverGetVersion")
    return version


def device_get_count():
    """cuDeviceGetCount."""
    cdef DriverFns* f = fns()
    cdef int count = 0
    cdef CUresult status
    with nogil:
        status = f.cuDeviceGetCount(&count)
    check(status, "cuDeviceGetCount")
    return count


cdef CUdevice _device(int ordinal) except? -1:
    cdef DriverFns* f = fns()
    cdef CUdevice dev = 0
    cdef CUresult status
    with nogil:
        status = f.cuDeviceGet(&dev, ordinal)
    check(status, f"cuDeviceGet(ordinal={ordinal})")
    return dev


def device_get_name(int ordinal):
    """cuDeviceGetName of the device with this ordinal, e.g. 'NVIDIA H100 80GB HBM3'."""
    cdef DriverFns* f = fns()
    cdef CUdevice dev = _device(ordinal)
    cdef char[256] buf
    cdef CUresult status
    with nogil:
        status = f.cuDeviceGetName(buf, 256, dev)
    check(status, "cuDeviceGetName")
    buf[255] = 0
    return _text(buf)


def device_get_attribute(int attribute, int ordinal):
    """cuDeviceGetAttribute; `attribute` is a DeviceAttribute."""
    cdef DriverFns* f = fns()
    cdef CUdevice dev = _device(ordinal)
    cdef int value = 0
    cdef CUresult status
    with nogil:
        status = f.cuDeviceGetAttribute(&value, attribute, dev)
    check(status, f"cuDeviceGetAttribute({DeviceAttribute(attribute).name})")
    return value


def device_total_mem(int ordinal):
    """cuDeviceTotalMem_v2: bytes of device memory."""
    cdef DriverFns* f = fns()
    cdef CUdevice dev = _device(ordinal)
    cdef size_t total = 0
    cdef CUresult status
    with nogil:
        status = f.cuDeviceTotalMem(&total, dev)
    check(status, "cuDeviceTotalMem_v2")
    return total


cdef CUcontext _retain_primary(int ordinal) except NULL:
    """The device's primary context, retained once per process (the context PyTorch uses)."""
    cdef DriverFns* f = fns()
    cdef CUdevice dev
    cdef CUcontext ctx = NULL
    cdef CUresult status
    if not 0 <= ordinal < 64:
        raise ValueError(f"device ordinal must be in [0, 64), got {ordinal}")
    if _primary[ordinal] == NULL:
        dev = _device(ordinal)
        with nogil:
            status = f.cuDevicePrimaryCtxRetain(&ctx, dev)
        check(status, f"cuDevicePrimaryCtxRetain(device {ordinal})")
        _primary[ordinal] = ctx
    return _primary[ordinal]


cdef CUcontext current_context() except NULL:
    cdef DriverFns* f = fns()
    cdef CUcontext ctx = NULL
    cdef CUresult status
    with nogil:
        status = f.cuCtxGetCurrent(&ctx)
    check(status, "cuCtxGetCurrent")
    if ctx != NULL:
        return ctx
    ctx = _retain_primary(0)
    with nogil:
        status = f.cuCtxSetCurrent(ctx)
    check(status, "cuCtxSetCurrent")
    return ctx


def ctx_get_current():
    """cuCtxGetCurrent: the calling thread's current context handle, 0 when there is none."""
    cdef DriverFns* f = fns()
    cdef CUcontext ctx = NULL
    cdef CUresult status
    with nogil:
        status = f.cuCtxGetCurrent(&ctx)
    check(status, "cuCtxGetCurrent")
    return <uintptr_t>ctx


def ensure_context():
    """The current context handle; makes device 0's primary context current if there is none."""
    return <uintptr_t>current_context()


def primary_context(int ordinal):
    """The device's primary context handle (retained; not made current)."""
    return <uintptr_t>_retain_primary(ordinal)


def ctx_set_current(uintptr_t ctx):
    """cuCtxSetCurrent: binds a context handle (e.g. from primary_context) to the thread."""
    cdef DriverFns* f = fns()
    cdef CUresult status
    with nogil:
        status = f.cuCtxSetCurrent(<CUcontext>ctx)
    check(status, "cuCtxSetCurrent")


def ctx_get_device():
    """cuCtxGetDevice: ordinal of the current context's device (making one current if needed)."""
    cdef DriverFns* f = fns()
    cdef CUdevice dev = 0
    cdef CUresult status
    current_context()
    with nogil:
        status = f.cuCtxGetDevice(&dev)
    check(status, "cuCtxGetDevice")
    return dev


def synchronize():
    """cuCtxSynchronize: waits for all work of the current context."""
    cdef DriverFns* f = fns()
    cdef CUresult status
    current_context()
    with nogil:
        status = f.cuCtxSynchronize()
    check(status, "cuCtxSynchronize")


def stream_synchronize(uintptr_t stream):
    """cuStreamSynchronize on a raw stream handle (0: the legacy default stream)."""
    cdef DriverFns* f = fns()
    cdef CUresult status
    current_context()
    with nogil:
        status = f.cuStreamSynchronize(<CUstream>stream)
    check(status, "cuStreamSynchronize")


def tensor_map_encode_tiled(int data_type, uintptr_t address, dims, strides, box,
                            element_strides, int interleave, int swizzle, int l2_promotion,
                            int oob_fill):
    """cuTensorMapEncodeTiled: the 128-byte TMA descriptor of a tiled region, as bytes.

    Arguments in the driver's order, innermost dimension first: `dims` and `box` (elements) and
    `element_strides` have the rank's length (1 to 5), `strides` (bytes) one fewer. Enum values
    as in cuda.h. Validation with clear messages is `spio.cuda.tensor_map.tiled`'s; the driver's
    own checks surface as CudaDriverError (CUDA_ERROR_INVALID_VALUE).
    """
    cdef DriverFns* f = fns()
    cdef unsigned long long gdim[5]
    cdef unsigned long long gstride[4]
    cdef unsigned int bdim[5]
    cdef unsigned int estride[5]
    cdef unsigned char storage[128 + 64]
    # The driver wants the descriptor 64-byte aligned; a stack array is not, so align inside one.
    cdef void* desc = <void*>((<uintptr_t>storage + 63) & ~(<uintptr_t>63))
    cdef unsigned int rank = len(dims)
    cdef unsigned int i
    cdef CUresult status
    if not 1 <= rank <= 5 or len(box) != rank or len(element_strides) != rank:
        raise ValueError(
            f"tensor_map_encode_tiled: dims, box and element_strides need one entry per dimension "
            f"(1 to 5), got {len(dims)}, {len(box)} and {len(element_strides)}"
        )
    if len(strides) != rank - 1:
        raise ValueError(
            f"tensor_map_encode_tiled: strides has one entry per dimension but the innermost, "
            f"{rank - 1} here; got {len(strides)}"
        )
    for i in range(rank):
        gdim[i] = dims[i]
        bdim[i] = box[i]
        estride[i] = element_strides[i]
    for i in range(rank - 1):
        gstride[i] = strides[i]
    # The driver may want a context current (CUDA_ERROR_INVALID_CONTEXT is among its documented
    # results): the caller's is kept, else device 0's primary context is made current.
    current_context()
    with nogil:
        status = f.cuTensorMapEncodeTiled(
            desc, data_type, rank, <void*>address, gdim, gstride, bdim, estride, interleave,
            swizzle, l2_promotion, oob_fill)
    check(
        status,
        f"cuTensorMapEncodeTiled(type {data_type}, address {address:#x}, dims {tuple(dims)}, "
        f"strides {tuple(strides)}, box {tuple(box)}, swizzle {swizzle})",
    )
    return (<unsigned char*>desc)[:128]
