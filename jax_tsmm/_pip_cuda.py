"""Where NVIDIA's pip packages put the CUDA toolkit: ``nvidia/cu13`` (since CUDA 13)
in each place the ``nvidia`` namespace package spans. ``pip install 'jax[cuda13]'``
installs nvidia-cuda-nvcc there beside JAX's CUDA plugin, off PATH; with its nvvm,
runtime and crt packages it compiles the same cubins as the toolkit's nvcc of its
version (docs/gpu.md).

It imports nothing of the package, for CMakeLists.txt runs this file as a script
with the Python that builds, to find the compiler of the extension when no
toolkit is found: it prints that home, or nothing. ``_kernels.nvcc`` looks in the
same homes for the compiler of the kernels generated at lowering time.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig


def homes(extra_spans: tuple[str, ...] = ()) -> list[str]:
    """The ``nvidia/cu13`` of each span of the ``nvidia`` package on the path, then
    of ``extra_spans``."""
    spec = importlib.util.find_spec("nvidia")
    spans = list(spec.submodule_search_locations or []) if spec else []
    return [os.path.join(span, "cu13") for span in [*spans, *extra_spans]]


def compiler_home() -> str:
    """The first home holding an executable nvcc, or "". Under pip's build isolation
    the building Python's site-packages are off the path, but sysconfig still names
    them."""
    site = tuple(os.path.join(sysconfig.get_paths()[key], "nvidia") for key in ("purelib", "platlib"))
    return next((home for home in homes(site) if os.access(os.path.join(home, "bin", "nvcc"), os.X_OK)), "")


if __name__ == "__main__":
    print(compiler_home())
