"""spio: typed-dimension CUDA kernels for PyTorch, compiled at run time with NVRTC."""

__version__ = "0.1.0.dev0"
