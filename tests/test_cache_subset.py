"""scripts/cache_subset.py: the kernels a run asks for, copied out of a large cache."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "cache_subset.py"
COMPILE = """
import sys
from jax_tsmm import _kernels
from jax_tsmm.codegen import KernelSpec, Problem, default_config
for m in map(int, sys.argv[1:]):
    problem = Problem("atb", "float64", m, 23)
    _kernels.compile_module([KernelSpec(problem, default_config(problem))], "sm_90")
"""


@pytest.mark.nvcc
def test_copies_what_a_run_compiles_or_finds(tmp_path):
    """A run's cubins land in the small cache, whether compiled into the large one
    or found there; the large one keeps what it had."""
    script = tmp_path / "compile.py"
    script.write_text(COMPILE)
    large, small, smaller = tmp_path / "all", tmp_path / "carry", tmp_path / "carry2"

    def run(target, *widths):
        subprocess.run([sys.executable, str(SCRIPT), "--from", str(large), "--to", str(target), "--",
                        str(script), *widths], check=True, capture_output=True, text=True)

    run(small, "37", "38")
    assert len(list(large.iterdir())) == 2
    assert sorted(p.name for p in small.iterdir()) == sorted(p.name for p in large.iterdir())
    found = {p.name: p.stat().st_mtime_ns for p in large.iterdir()}
    run(smaller, "37")
    assert {p.name: p.stat().st_mtime_ns for p in large.iterdir()} == found  # found, not compiled again
    [copied] = smaller.iterdir()
    assert copied.name.startswith("tsmm_atb_float64_m37_n23_")
    assert copied.read_bytes() == (large / copied.name).read_bytes()
