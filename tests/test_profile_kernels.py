"""scripts/profile_kernels.py's configuration fields after an mtsm shape's '@' (also
taken by scripts/clocks_under_load.py): how a kernel dispatch passed over is named."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import sys

import pytest

from jax_tsmm.codegen import InvalidSpec
from jax_tsmm.codegen.mtsm import MtsmProblem, default_config

ROOT = pathlib.Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # its import of compare_configs, as when run as a script
spec = importlib.util.spec_from_file_location("profile_kernels", ROOT / "scripts" / "profile_kernels.py")
profile_kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(profile_kernels)


def test_fields_replace_the_models_configuration():
    problem = MtsmProblem(False, "float64", 8)
    named = profile_kernels.mtsm_override(
        problem, "tile_n=8,mma=true,k_groups=1,rows_per_thread=2,row_warps=8,k_steps=8,stages=4,blocks_per_sm=1")
    assert named.problem == problem
    assert named.config == dataclasses.replace(default_config(problem), mma=True, k_groups=1, rows_per_thread=2,
                                               row_warps=8, k_steps=8, stages=4, blocks_per_sm=1)
    assert named.block_rows == 128 and named.threads == 256


def test_a_configuration_that_does_not_fit_is_refused():
    """Three stages of 128 rows x 32 entries of K and their rows of X (39 KiB each): two such blocks need more
    shared memory than an SM has."""
    with pytest.raises(InvalidSpec, match="blocks_per_sm"):
        profile_kernels.mtsm_override(MtsmProblem(False, "float64", 8),
                                      "tile_n=8,mma=true,k_groups=1,rows_per_thread=4,row_warps=4,k_steps=8,stages=3,"
                                      "blocks_per_sm=2")
