# cython: language_level=3, boundscheck=False, wraparound=False
"""Modules, functions and launches over the CUDA Driver API (see spio.cuda.driver for the rules).

    module = Module.load(cubin)                       # into the current context (device 0's
    f = module.function("axpy", signature="ppif")    #   primary context if there is none)
    f.launch(grid, block, (y, x, n, alpha), smem=0, stream=torch.cuda.current_stream().cuda_stream)

A signature has one letter per kernel parameter, in order:

    p  device pointer: int (address), None (null), an object with data_ptr() (a CUDA tensor)
       or with __cuda_array_interface__
    i  int32      l  int64      f  float32      d  float64

Arguments are packed into a buffer on the C stack (no Python allocation per launch), then the GIL
is released for cuLaunchKernel. A wrong argument raises TypeError (wrong kind) or ValueError (out
of range) naming its index, before anything reaches the driver.
"""

from cpython.bool cimport PyBool_Check
from cpython.float cimport PyFloat_AsDouble, PyFloat_Check
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from libc.math cimport isfinite
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from spio.cuda.driver cimport (
    CUcontext, CUfunction, CUmodule, CUresult, CUstream, DriverFns, check, current_context, fns,
    generation, loaded_fns,
)

from operator import index as _index

from spio.errors import CudaDriverError

# Most parameters a signature may have; each is at most 8 bytes, so 256 stays far below the
# driver's 4 KiB kernel-parameter limit and the packing buffer fits on the stack.
cdef enum:
    MAX_ARGS = 256
_KINDS = {"p": "device pointer", "i": "int32", "l": "int64", "f": "float32", "d": "float64"}
_SIZES = {"p": 8, "i": 4, "l": 8, "f": 4, "d": 8}

CUDA_ERROR_INVALID_CONTEXT = 201

cdef enum:  # CUfunction_attribute values (cuda.h)
    _FUNC_MAX_THREADS_PER_BLOCK = 0
    _FUNC_SHARED_SIZE_BYTES = 1
    _FUNC_LOCAL_SIZE_BYTES = 3
    _FUNC_NUM_REGS = 4
    _FUNC_BINARY_VERSION = 6
    _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


def parse_signature(signature):
    """Validates a signature string ("ppif") and returns it as bytes."""
    if not isinstance(signature, str):
        raise TypeError(f"signature must be a str like 'ppif', got {type(signature).__name__}")
    for pos, kind in enumerate(signature):
        if kind not in _KINDS:
            raise ValueError(
                f"signature {signature!r}: letter {pos} is {kind!r}; use one of "
                + ", ".join(f"{k} ({v})" for k, v in _KINDS.items())
            )
    if len(signature) > MAX_ARGS:
        raise ValueError(f"signature has {len(signature)} parameters; at most {MAX_ARGS}")
    return signature.encode()


cdef str _describe(object value):
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


cdef object _arg_error(str entry, Py_ssize_t i, char kind, object value, str rule):
    k = chr(kind)
    return f"{entry}: argument {i} (signature letter {k!r}, {_KINDS[k]}) {rule}; got {_describe(value)}"


cdef inline int _fast_int(object value, long long* out) except -1:
    """1 (and *out set) when value is an exact int that fits a long long, else 0: the C path
    of the common case, with no Python arithmetic or allocation."""
    cdef int overflow = 0
    if not PyLong_CheckExact(value):
        return 0
    out[0] = PyLong_AsLongLongAndOverflow(value, &overflow)
    return overflow == 0


cdef uint64_t _pointer(object value, str entry, Py_ssize_t i) except? 0xFFFFFFFFFFFFFFFF:
    """The device address an argument of kind 'p' stands for."""
    cdef long long fast
    if value is None:
        return 0
    if _fast_int(value, &fast) and fast >= 0:
        return <uint64_t>fast
    if PyLong_CheckExact(value):
        addr = value
    elif PyBool_Check(value):
        raise TypeError(_arg_error(entry, i, b"p", value, "must be a pointer, not a bool"))
    else:
        data_ptr = getattr(value, "data_ptr", None)
        if data_ptr is not None:
            if getattr(value, "is_cuda", True) is False:
                raise TypeError(_arg_error(
                    entry, i, b"p", value,
                    "is not on a CUDA device; move it with .cuda() or .to(device)"))
            addr = data_ptr()
            if _fast_int(addr, &fast) and fast >= 0:
                return <uint64_t>fast
        else:
            cai = getattr(value, "__cuda_array_interface__", None)
            if cai is not None:
                addr = cai["data"][0]
            elif hasattr(value, "__index__"):
                addr = _index(value)
            else:
                raise TypeError(_arg_error(
                    entry, i, b"p", value,
                    "must be an int address, None, or an object with data_ptr() or "
                    "__cuda_array_interface__"))
    if not 0 <= addr < 2**64:
        raise ValueError(_arg_error(entry, i, b"p", value, "must be an address in [0, 2**64)"))
    return addr


cdef int64_t _integer(object value, str entry, Py_ssize_t i, char kind) except? -1:
    cdef long long fast
    if _fast_int(value, &fast) and (kind == b"l" or -2147483648 <= fast <= 2147483647):
        return fast
    if PyLong_CheckExact(value):
        v = value
    else:
        try:
            v = _index(value)
        except TypeError:
            raise TypeError(_arg_error(entry, i, kind, value, "must be an int")) from None
    if kind == b"i" and not -2**31 <= v < 2**31:
        raise ValueError(_arg_error(entry, i, kind, value, "must fit int32 [-2**31, 2**31)"))
    if kind == b"l" and not -2**63 <= v < 2**63:
        raise ValueError(_arg_error(entry, i, kind, value, "must fit int64 [-2**63, 2**63)"))
    return v


cdef double _floating(object value, str entry, Py_ssize_t i, char kind) except? -1.0:
    cdef double v
    if PyFloat_Check(value):
        v = PyFloat_AsDouble(value)
    elif PyBool_Check(value) or isinstance(value, (str, bytes)) or not (
            hasattr(value, "__float__") or hasattr(value, "__index__")):
        raise TypeError(_arg_error(entry, i, kind, value, "must be a float or an int"))
    else:
        v = PyFloat_AsDouble(value)
    if kind == b"f" and isfinite(v) and not isfinite(<float>v):
        raise ValueError(_arg_error(entry, i, kind, value, "overflows float32 (|x| > 3.4e38)"))
    return v


cdef int _pack(const char* kinds, Py_ssize_t nkinds, object args, str entry,
               uint64_t* slots, void** params) except -1:
    """Converts args per kinds into slots[i] (little-endian, low bytes) and points params[i]."""
    cdef Py_ssize_t i, n
    cdef int32_t v32
    cdef float f32
    cdef double f64
    cdef int64_t v64
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"{entry}: args must be a tuple or list, got {type(args).__name__}")
    n = len(args)
    if n != nkinds:
        raise TypeError(
            f"{entry}: signature {(<bytes>kinds[:nkinds]).decode()!r} takes {nkinds} arguments, "
            f"got {n}"
        )
    cdef char kind
    for i in range(n):
        value = args[i]
        kind = kinds[i]
        slots[i] = 0
        if kind == b"p":
            slots[i] = _pointer(value, entry, i)
        elif kind == b"i":
            v32 = <int32_t>_integer(value, entry, i, kind)
            memcpy(&slots[i], &v32, 4)
        elif kind == b"l":
            v64 = _integer(value, entry, i, kind)
            memcpy(&slots[i], &v64, 8)
        elif kind == b"f":
            f32 = <float>_floating(value, entry, i, kind)
            memcpy(&slots[i], &f32, 4)
        else:
            f64 = _floating(value, entry, i, kind)
            memcpy(&slots[i], &f64, 8)
        params[i] = &slots[i]
    return 0


def pack_args(signature, args, entry="kernel"):
    """The bytes the kernel receives: each argument at its natural size (p, l, d: 8; i, f: 4),
    concatenated without padding. Host-side view of what launch() packs, for tests."""
    cdef bytes kinds = parse_signature(signature)
    cdef uint64_t slots[MAX_ARGS]
    cdef void* params[MAX_ARGS]
    cdef Py_ssize_t i
    _pack(kinds, len(kinds), args, entry, slots, params)
    parts = []
    for i in range(len(kinds)):
        parts.append((<char*>&slots[i])[:_SIZES[chr(kinds[i])]])
    return b"".join(parts)


cdef int _dims(object value, unsigned int* out, str what) except -1:
    """grid/block: an int or a tuple/list of 1 to 3 ints, each in [1, 2**32)."""
    cdef long long fast
    out[0] = out[1] = out[2] = 1
    if _fast_int(value, &fast) and 1 <= fast <= 0xFFFFFFFF:
        out[0] = <unsigned int>fast
        return 0
    if PyLong_CheckExact(value):
        items = (value,)
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        items = value
    else:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    for j, item in enumerate(items):
        if _fast_int(item, &fast) and 1 <= fast <= 0xFFFFFFFF:
            out[j] = <unsigned int>fast
            continue
        if PyBool_Check(item) or not (PyLong_CheckExact(item) or hasattr(item, "__index__")):
            raise TypeError(f"{what}[{j}] must be an int, got {_describe(item)}")
        v = _index(item)
        if not 1 <= v < 2**32:
            raise ValueError(f"{what}[{j}] = {v}: every {what} dimension must be at least 1")
        out[j] = v
    return 0


cdef int _stream(object stream, CUstream* out) except -1:
    """A raw stream handle from an int, a torch.cuda.Stream (.cuda_stream) or __cuda_stream__."""
    cdef long long fast
    if _fast_int(stream, &fast) and fast >= 0:
        out[0] = <CUstream><uintptr_t>fast
        return 0
    if not PyLong_CheckExact(stream):
        if hasattr(stream, "cuda_stream"):
            stream = stream.cuda_stream
        elif hasattr(stream, "__cuda_stream__"):
            stream = stream.__cuda_stream__()[1]
        if PyBool_Check(stream) or not isinstance(stream, int):
            raise TypeError(
                f"stream must be a raw handle (int), a torch.cuda.Stream or an object with "
                f"__cuda_stream__, got {_describe(stream)}"
            )
    if not 0 <= stream < 2**64:
        raise ValueError(f"stream handle must be in [0, 2**64), got {stream}")
    out[0] = <CUstream><uintptr_t><uint64_t>stream
    return 0


cdef class Module:
    """A cubin (or PTX) image loaded into a context. Unloaded when garbage-collected."""

    cdef CUmodule _handle
    cdef CUcontext _ctx
    cdef unsigned long _generation
    cdef readonly bytes image

    def __cinit__(self):
        self._handle = NULL

    @staticmethod
    def load(image):
        """cuModuleLoadData into the current context (device 0's primary context if none).

        The image bytes are kept alive with the module.
        """
        cdef Module m = Module.__new__(Module)
        cdef DriverFns* f
        cdef CUresult status
        cdef const char* data
        if isinstance(image, (bytearray, memoryview)):
            image = bytes(image)
        if not isinstance(image, bytes) or not image:
            raise TypeError(f"Module.load: image must be non-empty bytes (a cubin), got "
                            f"{_describe(image)}")
        f = fns()
        m._ctx = current_context()
        m.image = image
        data = m.image
        with nogil:
            status = f.cuModuleLoadData(&m._handle, data)
        check(status, "cuModuleLoadData")
        m._generation = generation()
        return m

    def function(self, entry, signature):
        """cuModuleGetFunction for an `extern "C"` entry; `signature` as in the module doc."""
        cdef Function fn = Function.__new__(Function)
        cdef DriverFns* f = fns()
        cdef CUresult status
        cdef bytes name
        cdef const char* cname
        if not isinstance(entry, str):
            raise TypeError(f"entry must be the kernel's name (str), got {_describe(entry)}")
        fn._kinds = parse_signature(signature)
        name = entry.encode()
        cname = name
        with nogil:
            status = f.cuModuleGetFunction(&fn._handle, self._handle, cname)
        check(status, f"cuModuleGetFunction({entry!r})")
        fn.module = self
        fn.entry = entry
        fn.signature = signature
        fn._ctx = self._ctx
        return fn

    def __dealloc__(self):
        cdef DriverFns* f = loaded_fns()
        cdef CUcontext popped
        if self._handle == NULL or f == NULL or self._generation != generation():
            return
        with nogil:
            # Unload in the module's own context, whatever is current on this thread.
            if f.cuCtxPushCurrent(self._ctx) == 0:
                f.cuModuleUnload(self._handle)
                f.cuCtxPopCurrent(&popped)
        self._handle = NULL


cdef class Function:
    """A kernel entry of a loaded Module, with its argument signature."""

    cdef CUfunction _handle
    cdef CUcontext _ctx
    cdef bytes _kinds
    cdef readonly Module module
    cdef readonly str entry
    cdef readonly str signature

    def __repr__(self):
        return f"Function({self.entry!r}, signature={self.signature!r})"

    def launch(self, grid, block, args, smem=0, stream=0):
        """cuLaunchKernel on `stream` (a handle, 0 = legacy default stream) with `smem` bytes of
        dynamic shared memory; grid and block are ints or tuples of up to 3 ints."""
        cdef unsigned int[3] g
        cdef unsigned int[3] b
        cdef uint64_t slots[MAX_ARGS]
        cdef void* params[MAX_ARGS]
        cdef CUstream s
        cdef unsigned int shared
        cdef CUcontext cur = NULL
        cdef CUresult status
        cdef bint wrong_context = False
        cdef DriverFns* f = fns()
        cdef long long fast
        _dims(grid, g, "grid")
        _dims(block, b, "block")
        if _fast_int(smem, &fast) and 0 <= fast <= 0xFFFFFFFF:
            shared = <unsigned int>fast
        else:
            if PyBool_Check(smem) or not hasattr(smem, "__index__"):
                raise TypeError(f"{self.entry}: smem must be an int, got {_describe(smem)}")
            smem = _index(smem)
            if not 0 <= smem < 2**32:
                raise ValueError(f"{self.entry}: smem must be a number of bytes in [0, 2**32), "
                                 f"got {smem!r}")
            shared = smem
        _stream(stream, &s)
        _pack(self._kinds, len(self._kinds), args, self.entry, slots, params)
        with nogil:
            status = f.cuCtxGetCurrent(&cur)
            if status == 0 and cur == NULL:
                # A thread that never touched CUDA: bind the module's context, as PyTorch would.
                status = f.cuCtxSetCurrent(self._ctx)
                cur = self._ctx
            if status == 0 and cur != self._ctx:
                wrong_context = True
            elif status == 0:
                status = f.cuLaunchKernel(self._handle, g[0], g[1], g[2], b[0], b[1], b[2],
                                          shared, s, params, NULL)
        if wrong_context:
            raise CudaDriverError(
                CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
                f"{self.entry} was loaded in another context than the current one; make its "
                "device current (torch.cuda.set_device or `with torch.cuda.device(...)`) or "
                "load the module again on this device",
                "cuLaunchKernel",
            )
        if status != 0:
            check(status, f"cuLaunchKernel({self.entry}, grid={tuple(g)}, block={tuple(b)}, "
                          f"smem={shared})")

    cdef int _get(self, int attribute, str what) except? -1:
        cdef DriverFns* f = fns()
        cdef int value = 0
        cdef CUresult status
        with nogil:
            status = f.cuFuncGetAttribute(&value, attribute, self._handle)
        check(status, f"cuFuncGetAttribute({what}) of {self.entry}")
        return value

    @property
    def num_regs(self):
        """Registers per thread."""
        return self._get(_FUNC_NUM_REGS, "NUM_REGS")

    @property
    def local_bytes(self):
        """Local memory per thread in bytes (nonzero means register spills or stack arrays)."""
        return self._get(_FUNC_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES")

    @property
    def static_smem_bytes(self):
        """Statically declared shared memory per block in bytes."""
        return self._get(_FUNC_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES")

    @property
    def max_threads_per_block(self):
        """Most threads a block of this function may have (limited by its registers)."""
        return self._get(_FUNC_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK")

    @property
    def binary_version(self):
        """The SASS version the cubin targets, e.g. 90 for sm_90."""
        return self._get(_FUNC_BINARY_VERSION, "BINARY_VERSION")

    def set_max_dynamic_smem(self, nbytes):
        """Allows launches with up to `nbytes` of dynamic shared memory (above 48 KiB needs this;
        the ceiling is the device's max_smem_per_block_optin minus static_smem_bytes)."""
        cdef DriverFns* f = fns()
        cdef CUresult status
        cdef int value
        if not PyLong_CheckExact(nbytes) or not 0 <= nbytes < 2**31:
            raise ValueError(f"set_max_dynamic_smem: nbytes must be an int in [0, 2**31), "
                             f"got {nbytes!r}")
        value = nbytes
        with nogil:
            status = f.cuFuncSetAttribute(self._handle, _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, value)
        check(status, f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={value}) of {self.entry}")

    def max_active_blocks(self, block_threads, smem=0):
        """cuOccupancyMaxActiveBlocksPerMultiprocessor: resident blocks per SM at this size."""
        cdef DriverFns* f = fns()
        cdef CUresult status
        cdef int blocks = 0
        cdef int threads
        cdef size_t shared
        if not PyLong_CheckExact(block_threads) or not 1 <= block_threads < 2**31:
            raise ValueError(f"max_active_blocks: block_threads must be a positive int, "
                             f"got {block_threads!r}")
        if not PyLong_CheckExact(smem) or not 0 <= smem < 2**32:
            raise ValueError(f"max_active_blocks: smem must be an int in [0, 2**32), got {smem!r}")
        threads = block_threads
        shared = smem
        with nogil:
            status = f.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &blocks, self._handle, threads, shared)
        check(status, f"cuOccupancyMaxActiveBlocksPerMultiprocessor of {self.entry}")
        return blocks
