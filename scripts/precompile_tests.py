"""Compile here, for sm_90, the kernels a selection of the GPU tests asks for, into the
kernel cache, to carry to the device (docs/performance.md, Method).

    JAX_TSMM_CACHE_DIR=$PWD/.tsmm_cache python scripts/precompile_tests.py -k 'gauss_path or (tuned and complex128)'

The arguments are pytest's, after ``tests/test_gpu.py tests/test_mtsm_gpu.py -m gpu``:
give the selection a device call's `tests` step will make. The kernels of the families
in each module's KERNEL_FAMILIES (tests/kernel_families.py: the model's choices of
test_shapes, the forced-spec paths, the tuner's candidates and the tuned databases'
kernels) are compiled; the other tests' kernels, dispatch's choices, still compile on
the device.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

from jax_tsmm import _kernels

ARCH = "sm_90"
TESTS = pathlib.Path(__file__).parents[1] / "tests"
MODULES = ("test_gpu.py", "test_mtsm_gpu.py")
sys.path.insert(0, str(TESTS))  # the test modules' helpers, as pytest imports them
from kernel_families import selected_kernels  # noqa: E402


class Selection:
    """A pytest plugin that keeps the collected items."""

    def __init__(self) -> None:
        self.items = []

    def pytest_collection_finish(self, session) -> None:
        self.items = list(session.items)


def main() -> None:
    selection = Selection()
    code = pytest.main([*(str(TESTS / name) for name in MODULES), "-m", "gpu", "--collect-only", "-qq", "-p",
                        "no:cacheprovider", *sys.argv[1:]], plugins=[selection])
    if code != pytest.ExitCode.OK:
        sys.exit(code)
    modules = [module for module in dict.fromkeys(item.module for item in selection.items)
               if hasattr(module, "KERNEL_FAMILIES")]
    specs = list(dict.fromkeys(spec for module in modules for spec in selected_kernels(selection.items, module)))
    _kernels.precompile(specs, ARCH)
    print(f"{len(specs)} kernels of {len(selection.items)} tests for {ARCH} in {_kernels.cache_dir()}")


if __name__ == "__main__":
    main()
