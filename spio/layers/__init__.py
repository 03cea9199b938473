"""nn.Module layers backed by spio ops, and the model transform that swaps them in."""

__all__: list[str] = []
