"""scripts/multi_gpu_bench.py --small: its three ops over 1 and 2 host devices."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).parents[1] / "scripts" / "multi_gpu_bench.py"


def test_small_run_checks_each_op_on_two_devices(tmp_path):
    """The script exits 0 only where every result matches one device's and nothing
    is gathered; atb and the Gram matrix reduce by one all-reduce, ab by none."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--small"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {(m[1], int(m[2])): m[3] for m in re.finditer(r"^(atb|ab|gram)\s+(\d)\s.*?x\s+(\S+)", run.stdout, re.M)}
    assert rows == {("atb", 1): "-", ("atb", 2): "all-reduce", ("ab", 1): "-", ("ab", 2): "-",
                    ("gram", 1): "-", ("gram", 2): "all-reduce"}, run.stdout
