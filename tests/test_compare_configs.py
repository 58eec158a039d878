"""scripts/compare_configs.py --compile-only: a comparison's variants compiled on a
machine without a GPU, for the kernel cache to travel to one."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from jax_tsmm import _dispatch, _kernels, bench

ROOT = pathlib.Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("compare_configs", ROOT / "scripts" / "compare_configs.py")
compare_configs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_configs)


def test_compiles_the_variants_of_the_named_gpus_dispatched_kernel(monkeypatch):
    """--tuned --device: the variants of the kernel that GPU model's database serves at
    the bench's K, each valid combination once, and nothing timed."""
    compiled = []
    monkeypatch.setattr(_kernels, "precompile", lambda specs, arch: compiled.append((list(specs), arch)))
    monkeypatch.setattr(bench, "measure_ceilings", lambda: pytest.fail("timed on --compile-only"))
    monkeypatch.setattr(sys, "argv", ["compare_configs.py", "ab:complex128:60:60", "--tuned", "--compile-only",
                                      "--device", "NVIDIA H200", "--vary", "tile_n=1,2", "--vary", "stages=2,3"])
    compare_configs.main()
    problem = _dispatch.named_problem("ab", "complex128", 60, 60)
    k = bench.problem_rows(60, 60, np.dtype("complex128"))
    served = _dispatch.select_problem(problem, k, "sm_90", "NVIDIA H200")
    [(specs, arch)] = compiled
    assert arch == "sm_90"
    assert [s.problem for s in specs] == [served.problem] * 4
    assert [s.config for s in specs] == [dataclasses.replace(served.config, tile_n=t, stages=s)
                                         for t in (1, 2) for s in (2, 3)]


def test_device_goes_with_compile_only(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["compare_configs.py", "ab:float64:8:8", "--device", "NVIDIA H200"])
    with pytest.raises(SystemExit):
        compare_configs.main()
