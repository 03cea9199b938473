# Declarations shared by spio.cuda.driver and spio.cuda.module (cimport).
#
# The CUDA types are declared here, not taken from cuda.h, so building spio needs no CUDA toolkit:
# handles are opaque pointers, CUdevice is an int, and CUresult (a C enum) is an int.

ctypedef int CUresult
ctypedef int CUdevice
ctypedef void* CUcontext
ctypedef void* CUmodule
ctypedef void* CUfunction
ctypedef void* CUstream

# cuda.h's CUlaunchAttribute: an id, 4 bytes of padding, then a 64-byte value union aligned to
# 8 bytes (the only member spio sets is an int at its start): 72 bytes in all.
ctypedef struct CUlaunchAttribute:
    int id
    int pad
    int value
    int value_pad
    unsigned long long value_rest[7]

# cuda.h's CUlaunchConfig (56 bytes on 64-bit platforms: the stream pointer is 8-byte aligned).
ctypedef struct CUlaunchConfig:
    unsigned int gridDimX
    unsigned int gridDimY
    unsigned int gridDimZ
    unsigned int blockDimX
    unsigned int blockDimY
    unsigned int blockDimZ
    unsigned int sharedMemBytes
    CUstream hStream
    CUlaunchAttribute* attrs
    unsigned int numAttrs

# CUlaunchAttributeID values (cuda.h) that spio sets.
cdef enum:
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
    CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 14

# The driver entry points spio calls, filled from libcuda by dlsym. Every member is a pointer of
# the same size, and `driver._SYMBOLS` lists the exported names in exactly this order, so the
# loader fills the struct as an array of pointers (one table, not one line per symbol).
ctypedef struct DriverFns:
    CUresult (*cuInit)(unsigned int) noexcept nogil
    CUresult (*cuDriverGetVersion)(int*) noexcept nogil
    CUresult (*cuGetErrorName)(CUresult, const char**) noexcept nogil
    CUresult (*cuGetErrorString)(CUresult, const char**) noexcept nogil
    CUresult (*cuDeviceGetCount)(int*) noexcept nogil
    CUresult (*cuDeviceGet)(CUdevice*, int) noexcept nogil
    CUresult (*cuDeviceGetName)(char*, int, CUdevice) noexcept nogil
    CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) noexcept nogil
    CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) noexcept nogil
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) noexcept nogil
    CUresult (*cuCtxGetCurrent)(CUcontext*) noexcept nogil
    CUresult (*cuCtxSetCurrent)(CUcontext) noexcept nogil
    CUresult (*cuCtxGetDevice)(CUdevice*) noexcept nogil
    CUresult (*cuCtxPushCurrent)(CUcontext) noexcept nogil
    CUresult (*cuCtxPopCurrent)(CUcontext*) noexcept nogil
    CUresult (*cuCtxSynchronize)() noexcept nogil
    CUresult (*cuStreamSynchronize)(CUstream) noexcept nogil
    CUresult (*cuModuleLoadData)(CUmodule*, const void*) noexcept nogil
    CUresult (*cuModuleUnload)(CUmodule) noexcept nogil
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) noexcept nogil
    CUresult (*cuFuncGetAttribute)(int*, int, CUfunction) noexcept nogil
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int) noexcept nogil
    CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(
        int*, CUfunction, int, size_t) noexcept nogil
    CUresult (*cuLaunchKernel)(
        CUfunction, unsigned int, unsigned int, unsigned int,
        unsigned int, unsigned int, unsigned int,
        unsigned int, CUstream, void**, void**) noexcept nogil
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**) noexcept nogil
    CUresult (*cuTensorMapEncodeTiled)(
        void*, int, unsigned int, void*, const unsigned long long*, const unsigned long long*,
        const unsigned int*, const unsigned int*, int, int, int, int) noexcept nogil


# The loaded table; loads libcuda and runs cuInit on first use. Raises LibraryNotFoundError
# (no libcuda, or a libcuda missing a symbol) or CudaDriverError (cuInit failed).
cdef DriverFns* fns() except NULL

# The table when the library is loaded and initialized, else NULL; never loads (for __dealloc__).
cdef DriverFns* loaded_fns() noexcept

# Raises CudaDriverError(status, name, message, call) when status is not CUDA_SUCCESS.
cdef int check(CUresult status, str call) except -1

# The calling thread's current context; when there is none, device 0's primary context (the one
# PyTorch uses) is retained and made current.
cdef CUcontext current_context() except NULL

# Counts loads of the library; handles from an older generation are never passed back to it.
cdef unsigned long generation() noexcept
