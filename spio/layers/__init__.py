"""nn.Module layers backed by spio ops, and the model transform that swaps them in."""

from spio.layers.conv2d_gw8 import Conv2dGw8
from spio.layers.layernorm_2d import LayerNorm2d
from spio.layers.transform import TransformReport, transform

__all__: list[str] = ["Conv2dGw8", "LayerNorm2d", "TransformReport", "transform"]
