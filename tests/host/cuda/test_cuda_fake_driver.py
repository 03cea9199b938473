"""The binding end to end against a fake libcuda (fake_libcuda.c): no GPU, real dlopen.

The fake answers like an H100 and records what the binding passes it: launch geometry, the
packed parameter bytes, the stream, module unloads and whether the GIL was held during each call.
"""

from __future__ import annotations

import ctypes
import gc
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from spio.cuda import Module, device_attributes, device_count, driver, driver_version, known_device
from spio.errors import CudaDriverError, LibraryNotFoundError
from spio.settings import override

SOURCE = Path(__file__).with_name("fake_libcuda.c")
CUBIN = b"\x7fELF" + bytes(60)  # the fake accepts any image with the ELF magic


def _build(out: Path, *defines: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("needs a C compiler (cc, gcc or clang) to build the fake libcuda")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", *defines, "-o", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def fake_paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fake_libcuda")
    return {
        "full": _build(d / "libcuda_fake.so"),
        "no_launch": _build(d / "libcuda_fake_no_launch.so", "-DOMIT_LAUNCH"),
    }


def _use(path: Path):
    """Makes the binding load `path` at its next use; returns a ctypes view of the library."""
    driver._reset()
    device_attributes.cache_clear()
    return ctypes.CDLL(str(path))


@pytest.fixture
def fake(fake_paths):
    if driver.is_loaded():
        pytest.skip("a real driver is loaded in this process; fake-driver tests need a fresh one")
    with override(libcuda=str(fake_paths["full"])):
        lib = _use(fake_paths["full"])
        lib.fake_set_init_status(0)
        lib.fake_set_signature(b"")
        lib.fake_clear_current()  # contexts are per thread and would leak between tests
        try:
            yield lib
        finally:
            driver._reset()
            device_attributes.cache_clear()


def _last_launch(lib) -> tuple[tuple[int, ...], tuple[int, ...], int, int, bytes]:
    dims = (ctypes.c_uint * 6)()
    smem = ctypes.c_uint()
    stream = ctypes.c_ulonglong()
    lib.fake_last_launch(dims, ctypes.byref(smem), ctypes.byref(stream))
    buf = ctypes.create_string_buffer(4096)
    n = lib.fake_last_params(buf)
    return tuple(dims[:3]), tuple(dims[3:]), smem.value, stream.value, buf.raw[:n]


def test_device_queries_map_each_attribute(fake):
    assert device_count() == 2
    assert driver_version() == (12, 4)
    dev = device_attributes(0)
    expected = known_device("H100")
    # Every field but the memory size equals the published H100 figures the fake reports.
    for field in expected.__slots__:
        if field != "total_mem_bytes":
            assert getattr(dev, field) == getattr(expected, field), field
    assert dev.total_mem_bytes == 85520809984
    with pytest.raises(ValueError, match=r"ordinal must be in \[0, 2\)"):
        device_attributes(2)


def test_launch_passes_geometry_stream_and_packed_args(fake):
    fake.fake_set_signature(b"ppifld")
    f = Module.load(CUBIN).function("k", signature="ppifld")
    args = (0x1000, None, -7, 0.5, 2**40, -1.5)

    class Stream:  # like torch.cuda.Stream
        cuda_stream = 0xABC0

    f.launch((3, 2), 128, args, smem=4096, stream=Stream())
    grid, block, smem, stream, params = _last_launch(fake)
    assert (grid, block, smem, stream) == ((3, 2, 1), (128, 1, 1), 4096, 0xABC0)
    assert params == struct.pack("<QQifqd", 0x1000, 0, -7, 0.5, 2**40, -1.5)
    f.launch([1, 1, 5], (32, 4, 2), list(args), stream=0x10)
    assert _last_launch(fake)[:4] == ((1, 1, 5), (32, 4, 2), 0, 0x10)


def test_tensor_map_is_encoded_innermost_first_and_launched_by_value(fake):
    from spio.cuda.tensor_map import tiled

    # A (3, 100, 64) bf16 tensor with padded rows (stride 72), boxes of 1 x 32 x 64, swizzled.
    m = tiled(0x10000, "bfloat16", (3, 100, 64), (100 * 72, 72, 1), (1, 32, 64), swizzle=128,
              l2_promotion=256, oob_nan=True)  # fmt: skip
    q = struct.unpack("<16Q", m.raw)  # the fake spells its arguments out (fake_libcuda.c)
    assert q[0] == 0x10000
    assert q[1] == 9 | 3 << 8 | 0 << 16 | 3 << 24 | 3 << 32 | 1 << 40  # bf16, rank 3, ...
    assert q[2:5] == (64, 100, 3)  # dims, innermost first
    assert q[7:9] == (72 * 2, 100 * 72 * 2)  # byte strides of dims 1 and 2
    assert q[11:14] == (64 | 1 << 16, 32 | 1 << 16, 1 | 1 << 16)  # box | element stride
    assert (m.shape, m.box, m.swizzle, m.box_bytes) == ((3, 100, 64), (1, 32, 64), 128, 4096)
    fake.fake_set_signature(b"ptp")
    f = Module.load(CUBIN).function("k", signature="ptp")
    f.launch(1, 128, (0x20, m, 0x30))
    assert _last_launch(fake)[4] == struct.pack("<Q", 0x20) + m.raw + struct.pack("<Q", 0x30)


def test_tensor_map_errors(fake):
    from spio.cuda.tensor_map import tiled

    with pytest.raises(ValueError, match="16-byte aligned"):
        tiled(0x10008, "float16", (8, 8), (8, 1), (8, 8))
    # What the binding does not check, the driver does: its CUresult names the call.
    with pytest.raises(CudaDriverError, match="cuTensorMapEncodeTiled"):
        driver.tensor_map_encode_tiled(6, 0x10000, (8, 8), (3,), (8, 8), (1, 1), 0, 0, 0, 0)
    with pytest.raises(ValueError, match="one entry per dimension"):
        driver.tensor_map_encode_tiled(6, 0x10000, (8, 8), (16,), (8,), (1, 1), 0, 0, 0, 0)


def test_bound_launch_fixes_the_geometry_once(fake):
    fake.fake_set_signature(b"pi")
    f = Module.load(CUBIN).function("k", signature="pi")
    bound = f.bind((4, 3), (64, 2), 2048)
    assert (bound.grid, bound.block, bound.smem, bound.pdl) == ((4, 3, 1), (64, 2, 1), 2048, False)
    assert bound.function is f and "grid=(4, 3, 1)" in repr(bound)
    bound((0x3000, 9), 0x55)
    grid, block, smem, stream, params = _last_launch(fake)
    assert (grid, block, smem, stream) == ((4, 3, 1), (64, 2, 1), 2048, 0x55)
    assert params == struct.pack("<Qi", 0x3000, 9)
    assert _last_ex(fake) == (0, [])
    f.bind(2, 32, pdl=True)((0, 1), 0x56)
    assert _last_ex(fake) == (1, [(6, 1)])
    # Geometry is checked when bound, arguments when called, with the launch's messages.
    with pytest.raises(ValueError, match=r"grid\[0\] = 0"):
        f.bind(0, 32)
    with pytest.raises(TypeError, match="pdl must be True or False"):
        f.bind(1, 32, pdl=1)
    with pytest.raises(TypeError, match="signature 'pi' takes 2 arguments, got 1"):
        bound((0,))
    with pytest.raises(CudaDriverError) as e:
        f.bind(1, 2048)((0, 1))
    assert "cuLaunchKernel(k, grid=(1, 1, 1), block=(2048, 1, 1)" in e.value.call


def _last_ex(lib) -> tuple[int, list[tuple[int, int]]]:
    count = ctypes.c_int()
    ids, values = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    ex = lib.fake_last_launch_ex(ctypes.byref(count), ids, values)
    return ex, [(ids[i], values[i]) for i in range(count.value)]


def test_pdl_launch_goes_through_launch_kernel_ex_with_the_attribute(fake):
    fake.fake_set_signature(b"pif")
    f = Module.load(CUBIN).function("k", signature="pif")
    f.launch((5, 2), (64, 2), (0x2000, 3, 1.5), smem=1024, stream=0x77, pdl=True)
    grid, block, smem, stream, params = _last_launch(fake)
    assert (grid, block, smem, stream) == ((5, 2, 1), (64, 2, 1), 1024, 0x77)
    assert params == struct.pack("<Qif", 0x2000, 3, 1.5)
    # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6) = 1, and nothing else.
    assert _last_ex(fake) == (1, [(6, 1)])
    # The default (and pdl=False) keeps the plain cuLaunchKernel path.
    f.launch(1, 32, (0, 1, 2.0))
    assert _last_ex(fake) == (0, [])
    f.launch(1, 32, (0, 1, 2.0), pdl=False)
    assert _last_ex(fake) == (0, [])


def test_pdl_must_be_a_bool_and_errors_name_the_ex_call(fake):
    f = Module.load(CUBIN).function("k", signature="")
    with pytest.raises(TypeError, match="pdl must be True or False"):
        f.launch(1, 1, (), pdl=1)
    with pytest.raises(TypeError):
        f.launch(1, 1, (), 0, 0, True)  # keyword-only: no positional slot for it
    with pytest.raises(CudaDriverError) as e:
        f.launch(1, 2048, (), pdl=True)
    assert "cuLaunchKernelEx(k, grid=(1, 1, 1), block=(2048, 1, 1)" in e.value.call
    assert "programmatic stream serialization" in e.value.call


def test_carveout_launches_through_launch_kernel_ex_with_its_attribute(fake):
    fake.fake_set_signature(b"pi")
    f = Module.load(CUBIN).function("k", signature="pi")
    # CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (14) = the percent.
    f.launch(3, 64, (0x2000, 3), carveout=50)
    assert _last_ex(fake) == (1, [(14, 50)])
    f.launch(3, 64, (0x2000, 3), carveout=0)
    assert _last_ex(fake) == (1, [(14, 0)])
    bound = f.bind(3, 64, pdl=True, carveout=100)
    assert bound.carveout == 100 and repr(bound).endswith("pdl=True, carveout=100)")
    bound((0x2000, 3))
    assert _last_ex(fake) == (1, [(6, 1), (14, 100)])
    f.launch(3, 64, (0x2000, 3), carveout=-1)  # no preference: the plain path
    assert _last_ex(fake) == (0, []) and f.bind(1, 1).carveout == -1
    for bad in (101, -2, 50.0, True, "50", None):
        with pytest.raises(ValueError, match=r"carveout must be an int percent in \[0, 100\]"):
            f.bind(1, 1, carveout=bad)
    with pytest.raises(CudaDriverError) as e:
        f.launch(1, 2048, (0, 1), carveout=50)
    assert "cuLaunchKernelEx(k, grid=(1, 1, 1)" in e.value.call
    assert "preferred shared memory carveout 50%" in e.value.call


def test_gil_is_released_around_every_driver_call(fake):
    fake.fake_set_signature(b"pi")
    device_attributes(0)
    f = Module.load(CUBIN).function("k", signature="pi")
    f.launch(1, 1, (0, 1))
    f.launch(1, 1, (0, 1), pdl=True)
    f.launch(1, 1, (0, 1), carveout=50)
    f.bind(1, 1)((0, 1))
    driver.ctx_set_current(driver.primary_context(1))
    f.bind(1, 1)((0, 1))  # pushes and pops the module's context
    _ = (f.num_regs, f.local_bytes, f.max_active_blocks(128))
    driver.synchronize()
    assert fake.fake_gil_held_calls() == 0


@pytest.mark.parametrize(
    "grid, block, error, match",
    [
        (0, 32, ValueError, r"grid\[0\] = 0: every grid dimension must be at least 1"),
        ((1, 2, 3, 4), 32, TypeError, r"grid must be an int or a tuple of 1 to 3 ints"),
        (1, (32, -1), ValueError, r"block\[1\] = -1"),
        (1, 32.0, TypeError, r"block must be an int or a tuple"),
    ],
)
def test_bad_geometry_is_rejected_before_the_driver(fake, grid, block, error, match):
    f = Module.load(CUBIN).function("k", signature="")
    with pytest.raises(error, match=match):
        f.launch(grid, block, ())


def test_bad_stream_and_smem(fake):
    f = Module.load(CUBIN).function("k", signature="")
    with pytest.raises(TypeError, match="stream must be a raw handle"):
        f.launch(1, 1, (), stream="default")
    with pytest.raises(ValueError, match=r"smem must be a number of bytes"):
        f.launch(1, 1, (), smem=-1)


def test_driver_errors_carry_status_name_message_and_call(fake):
    f = Module.load(CUBIN).function("k", signature="")
    with pytest.raises(CudaDriverError) as e:
        f.launch(1, 2048, ())  # more threads per block than the device allows
    assert (e.value.status, e.value.name) == (1, "CUDA_ERROR_INVALID_VALUE")
    assert e.value.message == "fake driver error text"
    assert "cuLaunchKernel(k, grid=(1, 1, 1), block=(2048, 1, 1)" in e.value.call
    with pytest.raises(CudaDriverError, match="cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE"):
        Module.load(b"not a cubin")
    with pytest.raises(CudaDriverError, match=r"cuModuleGetFunction\('missing'\).*NOT_FOUND"):
        Module.load(CUBIN).function("missing", signature="")
    with pytest.raises(CudaDriverError, match="MAX_DYNAMIC_SHARED_SIZE_BYTES=300000"):
        f.set_max_dynamic_smem(300_000)


def test_function_attributes_and_occupancy(fake):
    f = Module.load(CUBIN).function("k", signature="pp")
    assert (f.num_regs, f.local_bytes, f.static_smem_bytes) == (32, 0, 0)
    assert (f.max_threads_per_block, f.binary_version) == (1024, 90)
    assert f.max_active_blocks(256) == 8
    assert f.max_active_blocks(128, smem=100_000) == 2
    f.set_max_dynamic_smem(232448)
    assert repr(f) == "Function('k', signature='pp')"
    assert f.module.image == CUBIN


def test_module_is_unloaded_in_its_own_context(fake):
    m = Module.load(CUBIN)
    f = m.function("k", signature="")
    loads, unloads = fake.fake_loads(), fake.fake_unloads()
    del m
    gc.collect()
    assert fake.fake_unloads() == unloads  # the function keeps its module alive
    driver.ctx_set_current(driver.primary_context(1))  # another context is current now
    del f
    gc.collect()
    assert fake.fake_unloads() == unloads + 1
    assert fake.fake_unload_in_module_ctx() >= 1
    assert fake.fake_loads() == loads


def test_context_rules(fake):
    # No context current: device 0's primary context is made current, as PyTorch would use.
    assert driver.ctx_get_current() == 0
    f = Module.load(CUBIN).function("k", signature="")
    ctx0 = driver.ctx_get_current()
    assert ctx0 == driver.primary_context(0) and driver.ctx_get_device() == 0

    # A thread that never touched CUDA gets the module's context bound at launch.
    failures = []

    def worker():
        try:
            f.launch(1, 1, ())
            assert driver.ctx_get_current() == ctx0
        except Exception as e:  # reported to the main thread
            failures.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert not failures

    # Another device's context is current: the launch runs in the module's context (the fake
    # refuses a launch whose module is not in the current context) and the caller's context is
    # current again afterwards, for a direct launch and a bound one.
    ctx1 = driver.primary_context(1)
    driver.ctx_set_current(ctx1)
    f.launch(1, 1, ())
    assert driver.ctx_get_current() == ctx1
    bound = f.bind(1, 1)
    bound(())
    assert driver.ctx_get_current() == ctx1
    driver.ctx_set_current(ctx0)
    f.launch(1, 1, ())
    bound(())
    assert driver.ctx_get_current() == ctx0


@pytest.mark.parametrize("status, count", [(100, 0), (34, 0)])
def test_no_device_or_stub_library_counts_zero(fake, status, count):
    fake.fake_set_init_status(status)
    driver._reset()
    assert device_count() == count
    assert driver_version() is None
    with pytest.raises(CudaDriverError, match=r"^cuInit: CUDA_ERROR_"):
        driver.synchronize()


def test_other_init_failures_raise(fake):
    fake.fake_set_init_status(999)
    driver._reset()
    with pytest.raises(CudaDriverError, match=r"cuInit: CUresult 999 \(999\): unknown error"):
        device_count()


def test_driver_without_a_symbol_is_reported(fake_paths):
    if driver.is_loaded():
        pytest.skip("a real driver is loaded in this process; fake-driver tests need a fresh one")
    try:
        with override(libcuda=str(fake_paths["no_launch"])):
            _use(fake_paths["no_launch"])
            with pytest.raises(LibraryNotFoundError, match="entry point cuLaunchKernel"):
                driver.synchronize()
    finally:
        driver._reset()
