"""The conv2d_gw8 kernel family: grouped 2-D convolution with 8 channels per group.

One module per concept, dependencies pointing one way: every module builds on `params`; `fprop`
and `wgrad` on `tune`; `wgrad` and `wgrad_reduce` on `wgrad_tiling`; none on the ops above.

- `params`: the layer (`Conv2dGw8Params`, its dgrad problem `dgrad_as_fprop`), the configs, and
  the occupancy rule the tilings share (`ctas_per_sm`);
- `fprop`: the forward kernel (spio/src/conv2d_gw8_fprop.cu) and, through one adapter onto the
  layer's dgrad problem, the input gradient (`DGRAD`);
- `wgrad`, `wgrad_tiling`, `wgrad_reduce`: the weight gradient's kernel, its split plan and the
  ordered reduction of its partial sums;
- `tune`: sampled layer shapes and runners for `spio tune collect`;
- `reference`: the fp64 PyTorch reference (and the CPU fallback) of all three passes.

The registry (`spio.kernels.KERNELS`) lists the families; nothing here runs at import.
"""
