"""One training step of an image classifier, as `spio bench e2e` times it.

Mixed precision as PyTorch recommends it: float32 parameters, the forward and the loss under
torch.autocast (fp16 with a GradScaler, or bf16 without one), SGD with momentum 0.9, cross-entropy
on fixed random labels; the model and its input channels_last (the caller converts them). The
model runs eager, or through torch.compile in its default mode or "reduce-overhead" (CUDA graphs:
each step is marked as a new one). The device is whatever the tensors are on, so the step also
runs on the CPU (bf16), which is how the host tests check it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
MODES = ("eager", "compile", "reduce-overhead")
LEARNING_RATE = 1e-3
MOMENTUM = 0.9


def compiled(model: nn.Module, mode: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The model as the mode runs it: itself, torch.compile(model), or in "reduce-overhead"."""
    if mode == "eager":
        return model
    if mode == "compile":
        return torch.compile(model)
    if mode == "reduce-overhead":
        return torch.compile(model, mode="reduce-overhead")
    raise ValueError(f"compiled: unknown mode {mode!r}; one of {MODES}")


def train_step(
    model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, *, dtype: str, mode: str
) -> Callable[[], torch.Tensor]:
    """A zero-argument training step (returns the loss tensor, unsynchronized) with its own
    optimizer and, for fp16, GradScaler."""
    if dtype not in DTYPES:
        raise ValueError(f"train_step: unknown dtype {dtype!r}; one of {sorted(DTYPES)}")
    run = compiled(model, mode)
    device = inputs.device.type
    autocast_dtype = DTYPES[dtype]
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    scaler = torch.amp.GradScaler(device) if dtype == "fp16" else None
    new_step = torch.compiler.cudagraph_mark_step_begin if mode == "reduce-overhead" else None

    def step() -> torch.Tensor:
        if new_step is not None:
            new_step()
        with torch.autocast(device, dtype=autocast_dtype):
            loss = F.cross_entropy(run(inputs), labels)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.detach()

    return step


def batch(
    size: int, classes: int, device: torch.device, image: int = 224
) -> tuple[torch.Tensor, torch.Tensor]:
    """A channels_last float32 input of `size` random images and random labels."""
    x = torch.randn(size, 3, image, image, device=device).to(memory_format=torch.channels_last)
    return x, torch.randint(0, classes, (size,), device=device)
