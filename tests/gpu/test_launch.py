"""GPU tests of the driver binding: NVRTC cubin -> Module.load -> Function.launch on torch tensors.

Covers: results on torch's current stream and on a side stream, capture and replay in a CUDA
graph, every argument kind (p i l f d; pointers from tensors and __cuda_array_interface__), big
dynamic shared memory, function attributes, DeviceAttributes against torch's device properties,
driver errors with their names, and a second process that loads the kernel from the disk cache
with compiles forbidden (SPIO_ASSERT_NO_COMPILE=1).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from spio.compiler import compile as spio_compile  # noqa: E402
from spio.cuda import (  # noqa: E402
    Module,
    device_attributes,
    device_count,
    driver_version,
    known_devices,
    synchronize,
)
from spio.errors import CudaDriverError  # noqa: E402
from spio.settings import override  # noqa: E402
from spio.testing import assert_close, poison, tolerance  # noqa: E402

pytestmark = pytest.mark.gpu

SOURCE = r"""
// out[i] = a*x[i] + b*y[i] + c for i < n, in double, rounded once to float.
extern "C" __global__ void combine(float* out, const float* x, const float* y, int n, float a,
                                   double b, long long c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)((double)a * x[i] + b * (double)y[i] + (double)c);
}

// Fills `words` floats of dynamic shared memory with their index, then writes them reversed:
// out[j] = words - 1 - j. Needs words * 4 bytes of dynamic shared memory.
extern "C" __global__ void reverse_smem(float* out, int words) {
    extern __shared__ float smem[];
    for (int j = threadIdx.x; j < words; j += blockDim.x) smem[j] = (float)j;
    __syncthreads();
    for (int j = threadIdx.x; j < words; j += blockDim.x) out[j] = smem[words - 1 - j];
}
"""

BLOCK = 128
GUARD = 64  # poisoned elements after the output: an out-of-bounds write shows up as non-NaN


@functools.cache
def _module() -> Module:
    return Module.load(spio_compile(SOURCE, arch=device_attributes().arch, name="launch_test.cu"))


def _combine():
    return _module().function("combine", signature="pppifdl")


def _inputs(n: int, seed: int):
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(n, generator=g, device="cuda", dtype=torch.float32)
    y = torch.randn(n, generator=g, device="cuda", dtype=torch.float32)
    a = float(
        torch.tensor(float(torch.rand(1, generator=g, device="cuda")) * 4 - 2, dtype=torch.float32)
    )  # quantized to float32, as the kernel sees it
    b, c = 0.375, -3
    return x, y, a, b, c


def _reference(x, y, a, b, c):
    return a * x.double() + b * y.double() + c


def _output(n: int):
    buf = poison(torch.empty(n + GUARD, device="cuda", dtype=torch.float32))
    return buf, buf[:n]


def _check(buf, n, ref, where):
    assert_close(buf[:n], ref, tolerance(torch.float32, depth=3), where=where)
    assert torch.isnan(buf[n:]).all(), f"{where}: wrote past the end of the output"


@pytest.mark.parametrize("n", [1, BLOCK, 1000, 100_003])
def test_launch_on_current_stream(n, seed):
    x, y, a, b, c = _inputs(n, seed)
    buf, out = _output(n)
    grid = (n + BLOCK - 1) // BLOCK
    _combine().launch(
        grid, BLOCK, (out, x, y, n, a, b, c), stream=torch.cuda.current_stream().cuda_stream
    )
    torch.cuda.synchronize()
    _check(buf, n, _reference(x, y, a, b, c), f"n={n} seed={seed}")


def test_launch_on_side_stream(seed):
    n = 4097
    x, y, a, b, c = _inputs(n, seed)
    buf, out = _output(n)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # inputs were made on the current stream
    with torch.cuda.stream(side):
        # The stream object itself (its .cuda_stream handle is used).
        _combine().launch((n + BLOCK - 1) // BLOCK, BLOCK, (out, x, y, n, a, b, c), stream=side)
    side.synchronize()
    _check(buf, n, _reference(x, y, a, b, c), f"side stream seed={seed}")


def test_pointer_from_cuda_array_interface(seed):
    class Wrapped:  # exposes only __cuda_array_interface__ (like CuPy or Numba arrays)
        def __init__(self, t):
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    n = 300
    x, y, a, b, c = _inputs(n, seed)
    buf, out = _output(n)
    _combine().launch(
        (n + BLOCK - 1) // BLOCK,
        BLOCK,
        (Wrapped(out), Wrapped(x), y.data_ptr(), n, a, b, c),
        stream=torch.cuda.current_stream().cuda_stream,
    )
    torch.cuda.synchronize()
    _check(buf, n, _reference(x, y, a, b, c), f"cuda_array_interface seed={seed}")


def test_launch_captured_in_cuda_graph_and_replayed(seed):
    n = 2048
    x, y, a, b, c = _inputs(n, seed)
    buf, out = _output(n)
    f = _combine()
    args = (out, x, y, n, a, b, c)
    grid = (n + BLOCK - 1) // BLOCK
    warm = torch.cuda.Stream()  # torch's recipe: warm up on a side stream before capture
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        f.launch(grid, BLOCK, args, stream=warm.cuda_stream)
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        f.launch(grid, BLOCK, args, stream=torch.cuda.current_stream().cuda_stream)
    # New inputs in the same buffers, poisoned output: only the replay can produce the result.
    x2, y2, *_ = _inputs(n, seed + 1)
    x.copy_(x2)
    y.copy_(y2)
    poison(buf)
    graph.replay()
    torch.cuda.synchronize()
    _check(buf, n, _reference(x, y, a, b, c), f"graph replay seed={seed}")


def test_big_dynamic_shared_memory_and_function_attributes():
    dev = device_attributes()
    f = _module().function("reverse_smem", signature="pi")
    assert f.num_regs > 0
    assert f.local_bytes == 0, "a trivial kernel should not spill"
    assert f.binary_version == 10 * dev.compute_capability[0] + dev.compute_capability[1]
    assert f.max_active_blocks(BLOCK) >= 1
    smem = dev.max_smem_per_block_optin - f.static_smem_bytes
    words = smem // 4
    f.set_max_dynamic_smem(smem)
    assert f.max_active_blocks(BLOCK, smem) == 1
    buf, out = _output(words)
    f.launch(1, BLOCK, (out, words), smem=smem, stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    ref = torch.arange(words - 1, -1, -1, device="cuda", dtype=torch.float64)
    _check(buf, words, ref, f"reverse_smem words={words}")
    with pytest.raises(CudaDriverError, match="MAX_DYNAMIC_SHARED_SIZE_BYTES"):
        f.set_max_dynamic_smem(dev.max_smem_per_block_optin + 1024)


def test_launches_with_a_preferred_carveout_run_plain_pdl_and_in_a_graph():
    """A launch carrying the carveout attribute runs, also when it needs more shared memory
    than the carveout (a hint), with PDL, and captured in a CUDA graph."""
    dev = device_attributes()
    f = _module().function("reverse_smem", signature="pi")
    smem = dev.max_smem_per_block_optin - f.static_smem_bytes
    words = smem // 4
    f.set_max_dynamic_smem(smem)
    stream = torch.cuda.current_stream().cuda_stream
    ref = torch.arange(words - 1, -1, -1, device="cuda", dtype=torch.float64)
    for carveout in (0, 50, 100):
        for pdl in (False, True):
            buf, out = _output(words)
            f.bind(1, BLOCK, smem, pdl=pdl, carveout=carveout)((out, words), stream)
            torch.cuda.synchronize()
            _check(buf, words, ref, f"reverse_smem carveout={carveout} pdl={pdl}")
    buf, out = _output(words)
    launch = f.bind(1, BLOCK, smem, carveout=50)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch((out, words), torch.cuda.current_stream().cuda_stream)
    poison(buf)
    graph.replay()
    torch.cuda.synchronize()
    _check(buf, words, ref, "reverse_smem carveout=50 in a graph")


def test_device_attributes_match_torch():
    dev = device_attributes(torch.cuda.current_device())
    props = torch.cuda.get_device_properties(dev.ordinal)
    assert device_count() == torch.cuda.device_count()
    assert driver_version() >= (12, 0)
    assert dev.name == props.name
    assert dev.compute_capability == (props.major, props.minor)
    assert dev.arch == f"sm_{props.major}{props.minor}"
    assert dev.sm_count == props.multi_processor_count
    assert dev.total_mem_bytes == props.total_memory
    pairs = {  # torch property -> our field; only those this torch version has
        "L2_cache_size": "l2_bytes",
        "max_threads_per_multi_processor": "max_threads_per_sm",
        "warp_size": "warp_size",
        "regs_per_multiprocessor": "regs_per_sm",
        "shared_memory_per_block": "max_smem_per_block",
        "shared_memory_per_block_optin": "max_smem_per_block_optin",
        "shared_memory_per_multiprocessor": "max_smem_per_sm",
    }
    for prop, field in pairs.items():
        if hasattr(props, prop):
            assert getattr(dev, field) == getattr(props, prop), f"{field} vs torch {prop}"


def test_known_device_table_matches_this_gpu():
    dev = device_attributes()
    known = known_devices().get(dev.name)
    if known is None:
        pytest.skip(f"{dev.name} is not in spio.cuda's table of known GPUs")
    for field in known.__slots__:
        if field in ("ordinal", "total_mem_bytes"):
            continue
        assert getattr(dev, field) == getattr(known, field), f"{dev.name}: {field}"
    # The table holds the nominal capacity; the driver reports a little less.
    assert 0.9 < dev.total_mem_bytes / known.total_mem_bytes <= 1.0


def test_bad_launch_config_raises_a_named_driver_error(seed):
    f = _combine()
    n = 64
    x, y, a, b, c = _inputs(n, seed)
    buf, out = _output(n)
    with pytest.raises(CudaDriverError) as e:
        f.launch(1, 4096, (out, x, y, n, a, b, c))  # more threads per block than any GPU has
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and e.value.status == 1
    assert e.value.message and "cuLaunchKernel(combine" in e.value.call
    # The context is still usable after the refused launch.
    f.launch(1, BLOCK, (out, x, y, n, a, b, c), stream=torch.cuda.current_stream().cuda_stream)
    synchronize()
    _check(buf, n, _reference(x, y, a, b, c), "launch after a refused one")


def test_bad_image_missing_entry_and_cpu_tensor():
    with pytest.raises(CudaDriverError, match="cuModuleLoadData: CUDA_ERROR_"):
        Module.load(b"\x7fELF definitely not a cubin")
    with pytest.raises(CudaDriverError, match="CUDA_ERROR_NOT_FOUND"):
        _module().function("no_such_kernel", signature="p")
    with pytest.raises(TypeError, match="argument 1 .* not on a CUDA device"):
        _combine().launch(1, 1, (torch.empty(1, device="cuda"), torch.empty(1), 0, 0, 0, 0.0, 0))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_launch_with_another_device_current_runs_on_the_module_device(seed):
    """A function loaded on device 0, launched while device 1 is current: it runs on device 0
    (its module's context is pushed for the launch) and device 1 is current again after, for
    a direct launch and a bound one."""
    f = _combine()  # loaded on device 0
    n = 1000
    x, y, a, b, c = _inputs(n, seed)
    for how in ("launch", "bind"):
        buf = poison(torch.empty(n + GUARD, device="cuda:0"))
        stream0 = torch.cuda.current_stream(0).cuda_stream
        with torch.cuda.device(1):
            torch.empty(1, device="cuda:1")  # makes device 1's context current on this thread
            args = (buf, x, y, n, a, b, c)
            grid = (n + BLOCK - 1) // BLOCK
            if how == "launch":
                f.launch(grid, BLOCK, args, stream=stream0)
            else:
                f.bind(grid, BLOCK)(args, stream0)
            assert torch.cuda.current_device() == 1
        torch.cuda.synchronize(0)
        _check(buf, n, _reference(x, y, a, b, c), f"{how} with device 1 current")


_SECOND_PROCESS = textwrap.dedent(
    """
    import sys, torch
    from spio.compiler import compile, default_cache
    from spio.cuda import Module, device_attributes
    source, seed = open(sys.argv[1]).read(), int(sys.argv[2])
    cubin = compile(source, arch=device_attributes().arch, name="launch_test.cu")
    f = Module.load(cubin).function("combine", signature="pppifdl")
    g = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(1000, generator=g, device="cuda")
    out = torch.full_like(x, float("nan"))
    f.launch(8, 128, (out, x, x, 1000, 1.0, 1.0, 1), stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    err = (out.double() - (2 * x.double() + 1)).abs().max().item()
    stats = default_cache().stats()
    print(f"compiles={stats.compiles} hits={stats.hits} err={err:.3g}")
    """
)


def test_second_process_loads_from_disk_cache_without_compiling(tmp_path, seed):
    cache_dir = tmp_path / "cache"
    with override(cache_dir=str(cache_dir), no_disk_cache=False, assert_no_compile=False):
        spio_compile(SOURCE, arch=device_attributes().arch, name="launch_test.cu")
    source = tmp_path / "launch_test.cu"
    source.write_text(SOURCE)
    env = {**os.environ, "SPIO_CACHE_DIR": str(cache_dir), "SPIO_ASSERT_NO_COMPILE": "1"}
    env.pop("SPIO_NO_DISK_CACHE", None)
    run = subprocess.run(
        [sys.executable, "-c", _SECOND_PROCESS, str(source), str(seed)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, f"second process failed:\n{run.stdout}\n{run.stderr}"
    line = run.stdout.strip().splitlines()[-1]
    assert line.startswith("compiles=0 hits=1 "), line
    assert float(line.split("err=")[1]) < 1e-5, line
