"""Size -> kernel selection: which kernel, or XLA's dot, serves a problem.

Precedence (Tensile's library logic): the tuning database of this GPU's
architecture, whose entries for (op, dtype, M, N) are split into K ranges by
thresholds; then the generator's model; XLA's dot where no kernel applies or
where the tuner measured XLA faster.
"""

from __future__ import annotations

import contextlib
import functools
import json
import pathlib

import numpy as np

from jax_tsmm.codegen import Config, InvalidSpec, KernelSpec, Problem, default_config
from jax_tsmm.codegen.abi import MAX_BATCH_DIMS

KERNEL_DTYPES = ("float32", "float64", "complex64", "complex128")
MAX_WIDTH = 128
TUNING_DIR = pathlib.Path(__file__).parent / "tuning"

_forced: list[KernelSpec] = []


@contextlib.contextmanager
def forced(spec: KernelSpec):
    """Lower every matching call traced inside the block with ``spec`` (the tuner's lever)."""
    _forced.append(spec)
    try:
        yield
    finally:
        _forced.pop()


def problem_key(problem: Problem) -> str:
    """Database key; conj and update are left out: conj flips signs and costs the
    same, and the update adds one read of y to the same kernel."""
    return f"{problem.op}:{problem.dtype}:{problem.m}x{problem.n}"


@functools.cache
def database(arch: str) -> dict:
    """The tuned entries for ``arch``: key -> list of {k_min, config | None, ...},
    sorted by k_min; config None means XLA's dot measured faster."""
    path = TUNING_DIR / f"{arch}.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())["entries"]


def _tuned(problem: Problem, k: int, arch: str) -> tuple[bool, Config | None]:
    """(found, config) from the database; config None with found means use XLA.
    The entry of the range holding K serves; below every range, the lowest
    range's (a measured choice beats the untimed model)."""
    entries = database(arch).get(problem_key(problem), [])
    if not entries:
        return False, None
    chosen = entries[0]
    for entry in entries:
        if entry["k_min"] <= k:
            chosen = entry
    return True, Config(**chosen["config"]) if chosen["config"] else None


def select(op: str, dtype, m: int, n: int, k: int, batch_dims: int, conj: bool,
           arch: str = "sm_90", *, update: bool = False) -> KernelSpec | None:
    """The kernel for this problem, or None to use XLA's dot. ab's fused update
    (``update``) takes the configuration tuned for plain ab."""
    dtype = np.dtype(dtype).name
    if dtype not in KERNEL_DTYPES or batch_dims > MAX_BATCH_DIMS:
        return None
    if not (1 <= m <= MAX_WIDTH and 1 <= n <= MAX_WIDTH) or k == 0:
        return None
    problem = Problem(op, dtype, m, n, conj=conj, update=update)
    for spec in reversed(_forced):
        if spec.problem == problem:
            return spec
    found, config = _tuned(problem, k, arch)
    if found:
        return None if config is None else KernelSpec(problem, config)
    try:
        return KernelSpec(problem, default_config(problem))
    except InvalidSpec:
        return None
