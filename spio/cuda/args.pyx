# cython: language_level=3, boundscheck=False, wraparound=False
"""Kernel arguments: signatures, and packing Python values into what cuLaunchKernel reads.

A signature has one letter per kernel parameter, in order:

    p  device pointer: int (address), None (null), an object with data_ptr() (a CUDA tensor)
       or with __cuda_array_interface__
    i  int32      l  int64      f  float32      d  float64
    t  TMA tensor map, passed by value (128 bytes; the kernel parameter is a
       `const __grid_constant__ spio::tma::Descriptor`): a spio.cuda.TensorMap, or bytes of
       length 128

`pack` writes each value into an 8-byte slot of a caller's buffer (the C stack in
Function.launch: no Python allocation per launch, thread-safe) and points the parameter array at
it (a tensor map: at its own 128 bytes, which the args keep alive). Exact ints take a C path with
no Python arithmetic. A wrong argument raises TypeError (wrong kind) or ValueError (out of range)
naming the kernel, its index, its letter and the rule.
"""

from cpython.bool cimport PyBool_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_AsDouble, PyFloat_Check
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from libc.math cimport isfinite
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from libc.string cimport memcpy

from spio.cuda.driver cimport CUstream

from operator import index as _index

_KINDS = {
    "p": "device pointer", "i": "int32", "l": "int64", "f": "float32", "d": "float64",
    "t": "TMA tensor map",
}
_SIZES = {"p": 8, "i": 4, "l": 8, "f": 4, "d": 8, "t": 128}


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


cdef str describe(object value):
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


cdef object _arg_error(str entry, Py_ssize_t i, char kind, object value, str rule):
    k = chr(kind)
    return f"{entry}: argument {i} (signature letter {k!r}, {_KINDS[k]}) {rule}; got {describe(value)}"


cdef int fast_int(object value, long long* out) except -1:
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
    if fast_int(value, &fast) and fast >= 0:
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
            if fast_int(addr, &fast) and fast >= 0:
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
    if fast_int(value, &fast) and (kind == b"l" or -2147483648 <= fast <= 2147483647):
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


cdef void* _tensor_map(object value, str entry, Py_ssize_t i) except NULL:
    """The 128 bytes an argument of kind 't' passes: value's `raw` attribute (a
    spio.cuda.TensorMap stores its bytes there) or value itself (bytes). The pointer stays valid
    while the caller's args hold the value, which holds the bytes."""
    raw = value if PyBytes_CheckExact(value) else getattr(value, "raw", None)
    if raw is None or not PyBytes_CheckExact(raw):
        raise TypeError(_arg_error(
            entry, i, b"t", value,
            "must be a spio.cuda.TensorMap (from spio.cuda.tensor_map.tiled) or bytes"))
    if PyBytes_GET_SIZE(raw) != 128:
        raise ValueError(_arg_error(
            entry, i, b"t", value, f"must be 128 bytes (a CUtensorMap), not {len(raw)}"))
    return <void*>PyBytes_AS_STRING(raw)


cdef int pack(const char* kinds, Py_ssize_t nkinds, object args, str entry,
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
        elif kind == b"t":
            params[i] = _tensor_map(value, entry, i)
            continue
        else:
            f64 = _floating(value, entry, i, kind)
            memcpy(&slots[i], &f64, 8)
        params[i] = &slots[i]
    return 0


def pack_args(signature, args, entry="kernel"):
    """The bytes the kernel receives: each argument at its natural size (p, l, d: 8; i, f: 4;
    t: 128), concatenated without padding. Host-side view of what launch() packs, for tests."""
    cdef bytes kinds = parse_signature(signature)
    cdef uint64_t slots[MAX_ARGS]
    cdef void* params[MAX_ARGS]
    cdef Py_ssize_t i
    pack(kinds, len(kinds), args, entry, slots, params)
    parts = []
    for i in range(len(kinds)):
        parts.append((<char*>params[i])[:_SIZES[chr(kinds[i])]])
    return b"".join(parts)


cdef int dims(object value, unsigned int* out, str what) except -1:
    """grid/block: an int or a tuple/list of 1 to 3 ints, each in [1, 2**32)."""
    cdef long long fast
    out[0] = out[1] = out[2] = 1
    if fast_int(value, &fast) and 1 <= fast <= 0xFFFFFFFF:
        out[0] = <unsigned int>fast
        return 0
    if PyLong_CheckExact(value):
        items = (value,)
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        items = value
    else:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    for j, item in enumerate(items):
        if fast_int(item, &fast) and 1 <= fast <= 0xFFFFFFFF:
            out[j] = <unsigned int>fast
            continue
        if PyBool_Check(item) or not (PyLong_CheckExact(item) or hasattr(item, "__index__")):
            raise TypeError(f"{what}[{j}] must be an int, got {describe(item)}")
        v = _index(item)
        if not 1 <= v < 2**32:
            raise ValueError(f"{what}[{j}] = {v}: every {what} dimension must be at least 1")
        out[j] = v
    return 0


cdef int stream_handle(object stream, CUstream* out) except -1:
    """A raw stream handle from an int, a torch.cuda.Stream (.cuda_stream) or __cuda_stream__."""
    cdef long long fast
    if fast_int(stream, &fast) and fast >= 0:
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
                f"__cuda_stream__, got {describe(stream)}"
            )
    if not 0 <= stream < 2**64:
        raise ValueError(f"stream handle must be in [0, 2**64), got {stream}")
    out[0] = <CUstream><uintptr_t><uint64_t>stream
    return 0

