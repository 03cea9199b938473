"""benchmarks/sweep_conv2d_gw8.py on the host: argument parsing and the no-GPU exit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from script_module import load_script

SCRIPT = Path(__file__).parents[3] / "benchmarks" / "sweep_conv2d_gw8.py"


@pytest.fixture(scope="module")
def sweep():
    yield from load_script(SCRIPT)


def test_points_and_passes_parse(sweep):
    assert sweep.parse_points("64,56,3,128; 512,7,7,8") == [(64, 56, 3, 128, 1), (512, 7, 7, 8, 1)]
    assert sweep.parse_points("56,56,3,256,2") == [(56, 56, 3, 256, 2)]
    assert sweep.parse_points(sweep.DEFAULT_POINTS)[0] == (64, 56, 3, 128, 1)
    assert sweep.parse_passes("fprop, wgrad") == ["fprop", "wgrad"]


@pytest.mark.parametrize("bad", ["64,56,3", "64,56,3,x", "", "64;56", "64,56,3,8,1,1", "8,9,3,1,3"])
def test_bad_points_name_the_rule(sweep, bad):
    with pytest.raises(ValueError, match="C,HW,K,N"):
        sweep.parse_points(bad)


def test_bad_pass_is_an_error(sweep, capsys):
    with pytest.raises(ValueError, match="fprop"):
        sweep.parse_passes("forward")
    with pytest.raises(SystemExit):
        sweep.main(["--kernel", "forward"])
    assert "--kernel" in capsys.readouterr().err


def test_without_gpu_says_so(sweep, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message; this machine has a CUDA GPU")
    assert sweep.main(["--kernel", "fprop", "--points", "8,7,3,1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_config_filter_keeps_the_named_configs_and_names_the_missing(sweep):
    from spio.cuda import known_device
    from spio.kernels.conv2d_gw8 import wgrad as wg
    from spio.kernels.conv2d_gw8.params import Conv2dGw8Params

    p = Conv2dGw8Params(n=32, c=64, h=56, w=56, r=3, s=3, pad_h=1, pad_w=1, has_bias=True)
    space = wg.configs(p, known_device("H100"))
    pick = frozenset({str(space[3]), str(space[7])})
    assert sweep.select_configs(space, pick, "wgrad") == [space[3], space[7]]
    with pytest.raises(ValueError, match="not in the space"):
        sweep.select_configs(space, pick | {"Conv2dGw8WgradConfig(block_p=3)"}, "wgrad")
