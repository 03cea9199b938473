"""nn.Module layers backed by spio ops, and the model transform that swaps them in."""

from spio.layers.layernorm_2d import LayerNorm2d

__all__: list[str] = ["LayerNorm2d"]
