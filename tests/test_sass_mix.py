"""scripts/sass_mix.py: the instruction mix of a kernel's inner loop, from its SASS."""

from __future__ import annotations

import importlib.util
import lzma
import pathlib
import re
import shutil

import pytest

ROOT = pathlib.Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("sass_mix", ROOT / "scripts" / "sass_mix.py")
sass_mix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sass_mix)

# cuobjdump -sass of the model's complex128 atb 64 kernel (Gauss, 4 x 2 tiles), after
# the fifty-seventh round's changes (docs/performance.md), packed by xz as docs/bench keeps its logs.
RECORDED = ROOT / "docs" / "bench" / "sm90-2026-11-29-sass-model-c128-atb-64.txt.xz"


def test_halves_of_a_recorded_listing():
    """The two copies of the row step: the last chunk's guarded one, then the full
    chunks' with no predicated instruction, no zeroing and no moves."""
    kind, (last_chunk, full_chunks) = sass_mix.halves(sass_mix.instructions(lzma.decompress(RECORDED.read_bytes()).decode()))
    assert kind == "DMMA"
    for part in (last_chunk, full_chunks):
        assert sum(op.startswith("DMMA") for op in part) == 96
    assert any(op.startswith("@") for op in last_chunk) and "CS2R" in last_chunk
    assert not any(op.startswith("@") or op in ("CS2R", "MOV", "IMAD.MOV.U32") for op in full_chunks)
    assert full_chunks.count("LDS.64") == 56


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump (PyPI: nvidia-cuda-cuobjdump)")
def test_reports_a_compiled_kernel(tmp_path):
    """Compiled here, the model's float64 atb 64 kernel: DMMA, no spills."""
    text = sass_mix.report("atb:float64:64:64", sass_mix.kernel_of("atb:float64:64:64", True, ""), tmp_path)
    assert "DMMA" in text and "0 bytes spilled" in text
    assert list(tmp_path.glob("*.sass"))


@pytest.mark.nvcc
def test_reports_the_search_candidates_registers(tmp_path):
    """--candidates: the search's first candidates for float64 atb 8x8, compiled in one
    module, each with its estimate, its launch bound and ptxas's count within it."""
    lines = sass_mix.candidates_report("atb:float64:8:8", 3, tmp_path).splitlines()
    assert lines[0] == "atb:float64:8:8: the search's first 3 candidates" and len(lines) == 4
    for line in lines[1:]:
        bound, registers = map(int, re.search(r"estimate \d+, under a bound \d+, bound (\d+); ptxas (\d+) registers",
                                              line).groups())
        assert 0 < registers <= bound, line
