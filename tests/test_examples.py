"""The README's examples, run as it says, on the installed package."""

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
SCIENTIFIC = re.compile(r"\d\.\d+e[+-]\d+")  # how the examples print errors and residuals


@pytest.mark.parametrize("script", ["quickstart.py", "block_lanczos.py", "randomized_svd.py"])
def test_example_runs_and_reports_small_errors(script, tmp_path):
    """`python examples/SCRIPT` from outside the checkout (so the installed package is
    imported) exits cleanly, and every error, residual and orthogonality figure it
    prints is below 1e-5: against jnp.matmul, the float64 reference and the exact
    eigenvalues and singular values (float32's batched product is the largest, about
    4e-7); the eigensolver converged."""
    run = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    figures = [float(figure) for figure in SCIENTIFIC.findall(run.stdout)]
    assert len(figures) >= 5 and max(figures) < 1e-5, run.stdout
    assert "not converged" not in run.stdout
