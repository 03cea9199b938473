# cython: language_level=3
"""Modules, functions and launches over the CUDA Driver API (see spio.cuda.driver for the rules).

    module = Module.load(cubin)                       # into the current context (device 0's
    f = module.function("axpy", signature="ppif")    #   primary context if there is none)
    f.launch(grid, block, (y, x, n, alpha), smem=0, stream=torch.cuda.current_stream().cuda_stream)

Signatures and argument packing are in spio.cuda.args. A launch packs the arguments on the C
stack, then releases the GIL for cuCtxGetCurrent + cuLaunchKernel (cuLaunchKernelEx with the
programmatic-stream-serialization attribute when launch(..., pdl=True), the preferred
shared-memory carveout when launch(..., carveout=percent)), pushing the module's context first
when another one is current. `f.bind(grid, block, smem)` checks the geometry once
and returns a `Launch`, called as `bound(args, stream)`: the path of repeated launches.
"""

from cpython.bool cimport PyBool_Check
from cpython.long cimport PyLong_CheckExact
from libc.stdint cimport uint64_t
from libc.string cimport memset

from spio.cuda.args cimport MAX_ARGS, describe, dims, fast_int, pack, stream_handle
from spio.cuda.driver cimport (
    CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, CUcontext, CUfunction, CUlaunchAttribute,
    CUlaunchConfig, CUmodule, CUresult, CUstream, DriverFns, check, current_context, fns,
    generation, loaded_fns,
)

from operator import index as _index

from spio.cuda.args import parse_signature

cdef class Launch  # below: a Function with its geometry bound


cdef enum:  # CUfunction_attribute values (cuda.h)
    _FUNC_MAX_THREADS_PER_BLOCK = 0
    _FUNC_SHARED_SIZE_BYTES = 1
    _FUNC_LOCAL_SIZE_BYTES = 3
    _FUNC_NUM_REGS = 4
    _FUNC_BINARY_VERSION = 6
    _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


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
                            f"{describe(image)}")
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
            raise TypeError(f"entry must be the kernel's name (str), got {describe(entry)}")
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

    def launch(self, grid, block, args, smem=0, stream=0, *, pdl=False, carveout=-1):
        """cuLaunchKernel on `stream` (a handle, 0 = legacy default stream) with `smem` bytes of
        dynamic shared memory; grid and block are ints or tuples of up to 3 ints.

        pdl=True launches with cuLaunchKernelEx and the attribute
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION set to 1 (programmatic dependent
        launch, compute capability 9.0+): this kernel may start before the previous kernel in
        the stream has finished, as soon as all that kernel's CTAs have executed
        `griddepcontrol.launch_dependents` or exited. The kernel must therefore execute
        `griddepcontrol.wait` (which returns once the previous grid has completed and its
        memory is visible) before it touches anything that grid writes. Whether to ask for it
        is the caller's policy (spio.kernels.loader asks for it only on 9.0+ devices with a
        CUDA 12.3+ driver, under which a captured launch becomes a programmatic graph edge).

        The launch runs in the module's context: when another context is current on this
        thread (another device's), the module's is pushed for the launch and popped after, so a
        kernel loaded for one GPU never runs on another; `stream` must belong to that device.

        carveout in 0..100 launches with cuLaunchKernelEx and the attribute
        CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: the split of the SM's unified L1 /
        shared memory this launch prefers, in percent of the maximum shared memory (a hint: the
        driver takes more if the launch needs it). -1 (the default) sets none: the driver's
        choice. A launch attribute, not the function's (CU_FUNC_ATTRIBUTE_...), which the driver
        may share between loads of the same image. It needs a driver that knows the attribute
        (spio.kernels.loader asks for it on CUDA 12.8+ drivers only)."""
        cdef Launch bound = self.bind(grid, block, smem, pdl=pdl, carveout=carveout)
        bound(args, stream)

    def bind(self, grid, block, smem=0, *, pdl=False, carveout=-1):
        """A `Launch` of this function with grid, block, smem, pdl and carveout fixed (checked
        once, as `launch` checks them): calling it with (args, stream) packs the arguments and
        launches, the cheapest path for a launch repeated with the same geometry."""
        cdef Launch bound = Launch.__new__(Launch)
        cdef long long fast
        if pdl is not True and pdl is not False:
            raise TypeError(f"{self.entry}: pdl must be True or False, got {describe(pdl)}")
        if not PyLong_CheckExact(carveout) or not -1 <= carveout <= 100:
            raise ValueError(f"{self.entry}: carveout must be an int percent in [0, 100] or -1 "
                             f"(no preference), got {carveout!r}")
        dims(grid, bound._grid, "grid")
        dims(block, bound._block, "block")
        if fast_int(smem, &fast) and 0 <= fast <= 0xFFFFFFFF:
            bound._smem = <unsigned int>fast
        else:
            if PyBool_Check(smem) or not hasattr(smem, "__index__"):
                raise TypeError(f"{self.entry}: smem must be an int, got {describe(smem)}")
            smem = _index(smem)
            if not 0 <= smem < 2**32:
                raise ValueError(f"{self.entry}: smem must be a number of bytes in [0, 2**32), "
                                 f"got {smem!r}")
            bound._smem = smem
        bound._programmatic = pdl
        bound._carveout = carveout
        bound.function = self
        return bound

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


cdef class Launch:
    """A Function with its launch geometry fixed (`Function.bind`): `launch(args, stream)`."""

    cdef unsigned int _grid[3]
    cdef unsigned int _block[3]
    cdef unsigned int _smem
    cdef bint _programmatic
    cdef int _carveout
    cdef readonly Function function

    @property
    def grid(self):
        return (self._grid[0], self._grid[1], self._grid[2])

    @property
    def block(self):
        return (self._block[0], self._block[1], self._block[2])

    @property
    def smem(self):
        return self._smem

    @property
    def pdl(self):
        return bool(self._programmatic)

    @property
    def carveout(self):
        return self._carveout

    def __repr__(self):
        tail = f", carveout={self._carveout}" if self._carveout != -1 else ""
        return (f"Launch({self.function.entry!r}, grid={self.grid}, block={self.block}, "
                f"smem={self._smem}, pdl={self.pdl}{tail})")

    def __call__(self, args, stream=0):
        """Packs `args` per the function's signature and launches on `stream` (a raw handle,
        a torch.cuda.Stream or an object with __cuda_stream__), in the function's context."""
        cdef uint64_t slots[MAX_ARGS]
        cdef void* params[MAX_ARGS]
        cdef CUstream s
        cdef CUcontext cur = NULL
        cdef CUcontext popped = NULL
        cdef CUcontext ctx = self.function._ctx
        cdef CUfunction handle = self.function._handle
        cdef CUresult status
        cdef bint pushed = False
        cdef DriverFns* f = fns()
        cdef CUlaunchAttribute attrs[2]
        cdef CUlaunchConfig config
        cdef unsigned int* g = self._grid
        cdef unsigned int* b = self._block
        cdef bint programmatic = self._programmatic
        cdef unsigned int n_attrs = 0
        stream_handle(stream, &s)
        pack(self.function._kinds, len(self.function._kinds), args, self.function.entry,
             slots, params)
        if programmatic or self._carveout != -1:
            memset(attrs, 0, sizeof(attrs))
            if programmatic:
                attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                attrs[n_attrs].value = 1
                n_attrs += 1
            if self._carveout != -1:
                attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
                attrs[n_attrs].value = self._carveout
                n_attrs += 1
            config.gridDimX, config.gridDimY, config.gridDimZ = g[0], g[1], g[2]
            config.blockDimX, config.blockDimY, config.blockDimZ = b[0], b[1], b[2]
            config.sharedMemBytes = self._smem
            config.hStream = s
            config.attrs = attrs
            config.numAttrs = n_attrs
        with nogil:
            status = f.cuCtxGetCurrent(&cur)
            if status == 0 and cur == NULL:
                # A thread that never touched CUDA: bind the module's context, as PyTorch would.
                status = f.cuCtxSetCurrent(ctx)
            elif status == 0 and cur != ctx:
                # Another device is current: launch in the module's context, then restore.
                status = f.cuCtxPushCurrent(ctx)
                pushed = status == 0
            if status == 0 and n_attrs:
                status = f.cuLaunchKernelEx(&config, handle, params, NULL)
            elif status == 0:
                status = f.cuLaunchKernel(handle, g[0], g[1], g[2], b[0], b[1], b[2],
                                          self._smem, s, params, NULL)
            if pushed:
                f.cuCtxPopCurrent(&popped)
        if status != 0:
            call = "cuLaunchKernelEx" if n_attrs else "cuLaunchKernel"
            extra = ", programmatic stream serialization" if programmatic else ""
            if self._carveout != -1:
                extra += f", preferred shared memory carveout {self._carveout}%"
            check(status, f"{call}({self.function.entry}, grid={self.grid}, "
                          f"block={self.block}, smem={self._smem}{extra})")
