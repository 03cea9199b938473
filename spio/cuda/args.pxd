# Kernel-argument packing shared with spio.cuda.module (cimport); see args.pyx.

from libc.stdint cimport uint64_t

from spio.cuda.driver cimport CUstream

# Most parameters a signature may have; each takes one 8-byte slot of the packing buffer (a
# tensor map is passed by a pointer to its own 128 bytes), so the buffer fits on the stack. The
# kernel's own parameter limit (4 KiB before sm_90's 32 KiB) is the driver's to check.
cdef enum:
    MAX_ARGS = 256

# 1 (and *out set) when value is an exact int that fits a long long, else 0.
cdef int fast_int(object value, long long* out) except -1

# "type repr" of a value for error messages, truncated.
cdef str describe(object value)

# Converts args per the signature letters `kinds` into slots[i] and points params[i] at it.
cdef int pack(const char* kinds, Py_ssize_t nkinds, object args, str entry,
              uint64_t* slots, void** params) except -1

# grid/block: an int or a tuple/list of 1 to 3 ints, each in [1, 2**32) -> out[3].
cdef int dims(object value, unsigned int* out, str what) except -1

# A raw stream handle from an int, a torch.cuda.Stream (.cuda_stream) or __cuda_stream__.
cdef int stream_handle(object stream, CUstream* out) except -1
