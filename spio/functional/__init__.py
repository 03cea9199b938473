"""PyTorch ops backed by spio kernels (`torch.ops.spio.*`), with documented PyTorch fallbacks.

Importing this module registers the ops with torch.library (it imports torch).
"""

__all__: list[str] = []
