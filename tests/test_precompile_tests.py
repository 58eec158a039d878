"""scripts/precompile_tests.py: the kernels a GPU test selection asks for, compiled ahead."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "precompile_tests.py"


@pytest.mark.nvcc
def test_compiles_each_kernel_of_the_selection_once(tmp_path):
    """test_gauss_path's cases at 50 x 50: two configurations, Aᵀ B and Aᴴ B, four K
    each: 16 tests, 4 kernels."""
    env = dict(os.environ, JAX_TSMM_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, str(SCRIPT), "-k", "gauss_path and 50"], env=env, check=True,
                          capture_output=True, text=True)
    assert "4 kernels of 16 tests for sm_90" in done.stdout
    assert len(list(tmp_path.glob("tsmm_atb*_complex128_m50_n50_*_sm_90_*.cubin"))) == 4


@pytest.mark.nvcc
def test_compiles_the_mtsm_tests_kernels_too(tmp_path):
    """test_mtsm_gpu's search candidates at Aᵀ X, float64, N = 3: the tuner's first
    kernels for it (its candidates and the model's neighbours), each once."""
    from test_mtsm_gpu import searched_specs

    specs = searched_specs(True, "float64", 3)
    env = dict(os.environ, JAX_TSMM_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, str(SCRIPT), "-k", "search_candidates and True-float64-3"], env=env,
                          check=True, capture_output=True, text=True)
    assert f"{len(specs)} kernels of 1 tests for sm_90" in done.stdout
    assert len(list(tmp_path.glob("tsmm_mtsmt_float64_n3_*.cubin"))) == len(specs)


@pytest.mark.nvcc
def test_compiles_the_models_kernels_of_the_selected_shapes(tmp_path):
    """test_shapes' cases Aᵀ B float64 2 x 8 and 2 x 12: the model's kernel of each,
    the one the case lowers (test_gpu.py's model_kernel), and no other case's."""
    from test_gpu import model_kernel

    specs = model_kernel("atb", "float64", 2, 8, False, 4099) + model_kernel("atb", "float64", 2, 12, False, 33)
    env = dict(os.environ, JAX_TSMM_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, str(SCRIPT), "-k", "test_shapes and (atb-float64-2-8- or atb-float64-2-12-)"],
                          env=env, check=True, capture_output=True, text=True)
    assert "2 kernels of 2 tests for sm_90" in done.stdout
    assert sorted(path.name.split("_sm_90_")[0] for path in tmp_path.glob("*.cubin")) == sorted(s.name for s in specs)
