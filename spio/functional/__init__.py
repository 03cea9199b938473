"""PyTorch ops backed by spio kernels (`torch.ops.spio.*`), with documented PyTorch fallbacks.

Importing this module registers the ops with torch.library (it imports torch). `clear_plans()`
forgets every op's launch plans (after changing what they captured: selections, loaded kernels,
SPIO_PDL, SPIO_AUTOTUNE).
"""

from spio.functional._plans import clear as clear_plans
from spio.functional.conv2d_gw8 import conv2d_gw8
from spio.functional.layernorm_2d import layernorm_2d
from spio.functional.matmul import matmul

__all__: list[str] = ["clear_plans", "conv2d_gw8", "layernorm_2d", "matmul"]
