"""PyTorch ops backed by spio kernels (`torch.ops.spio.*`), with documented PyTorch fallbacks.

Importing this module registers the ops with torch.library (it imports torch).
"""

from spio.functional.conv2d_gw8 import conv2d_gw8
from spio.functional.layernorm_2d import layernorm_2d
from spio.functional.matmul import matmul

__all__: list[str] = ["conv2d_gw8", "layernorm_2d", "matmul"]
