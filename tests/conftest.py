"""Test configuration: float64 on, Hypothesis profiles, and the gpu / nvcc markers.

Hypothesis profiles (pick one with the HYPOTHESIS_PROFILE environment variable):

    ci     (default) modest example counts: the CPU suite runs in a few minutes
    quick  a handful of examples per property, for a fast smoke run
    dev    many more examples, for a thorough local run

Under CI (the CI environment variable set) the "ci" profile is derandomized,
so every CI run draws the same examples.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import jax
import pytest

from jax_tsmm import _kernels
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)

# Make tests/reference.py importable from every test module as ``reference``.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci", max_examples=20, derandomize=bool(os.environ.get("CI")), **_COMMON
)
settings.register_profile("quick", max_examples=5, **_COMMON)
settings.register_profile("dev", max_examples=200, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def has_gpu() -> bool:
    """Whether JAX's default backend is a CUDA GPU."""
    try:
        return any(d.platform in ("gpu", "cuda") for d in jax.devices())
    except RuntimeError:
        return False


def has_nvcc() -> bool:
    try:
        return bool(_kernels.nvcc())
    except _kernels.KernelBuildError:
        return False


def pytest_report_header(config):
    devices = ", ".join(f"{d.platform}:{d.device_kind}" for d in jax.devices())
    profile = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    return f"jax {jax.__version__}; devices: {devices}; hypothesis profile: {profile}"


def pytest_addoption(parser):
    parser.addoption("--shard", action="append", default=[], metavar="I/N",
                     help="run the I-th of N interleaved shards of the selected tests (every N-th, from the "
                          "I-th): the GPU suite takes longer than one device call, so its shards go in several; "
                          "repeated, each a shard of the one before (a call's processes split its shard)")


def shard(items: list, spec: str) -> tuple[list, list]:
    """(kept, left out) of ``items`` for ``--shard I/N``: every N-th from the I-th
    (1-based), so each shard mixes the suite's kinds of test and takes about 1/N of
    its time."""
    index, _, count = spec.partition("/")
    if not (index.isdigit() and count.isdigit()) or not 1 <= int(index) <= int(count):
        raise pytest.UsageError(f"--shard {spec}: want I/N with 1 <= I <= N")
    kept = items[int(index) - 1::int(count)]
    chosen = set(kept)
    return kept, [item for item in items if item not in chosen]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Once a failed test's report is written, its frames let go of their locals: the
    traceback's reference cycle would keep them, a test's GPU arrays among them, until
    Python's cycle collector ran, which GPU memory does not prompt (pytest issue
    #12198), so one failure could exhaust the memory of the tests after it. Under
    --pdb the debugger still gets them."""
    yield
    if call.excinfo is not None and not item.config.getoption("usepdb"):
        traceback.clear_frames(call.excinfo.tb)
        frames = call.excinfo.tb
        while frames is not None:  # the dicts of locals the report's formatting read outlive
            frames.tb_frame.f_locals  # clear() until read again (CPython 3.11 and 3.12)
            frames = frames.tb_next


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected: a shard of what they keep
def pytest_collection_modifyitems(config, items):
    for spec in config.getoption("--shard"):
        items[:], left_out = shard(items, spec)
        config.hook.pytest_deselected(items=left_out)
    skip_gpu = None if has_gpu() else pytest.mark.skip(reason="needs a CUDA GPU")
    skip_nvcc = None if has_nvcc() else pytest.mark.skip(reason="needs the nvcc compiler")
    for item in items:
        if skip_gpu is not None and "gpu" in item.keywords:
            item.add_marker(skip_gpu)
        if skip_nvcc is not None and "nvcc" in item.keywords:
            item.add_marker(skip_nvcc)


@pytest.fixture(scope="module")
def model_kernels():
    """Dispatch by the generator's model alone (an empty tuning database), so every
    shape a test names reaches its kernel whatever the shipped database prefers."""
    from jax_tsmm import _dispatch

    with _dispatch.model_only():
        yield


@pytest.fixture
def tuned_dispatch(monkeypatch):
    """Dispatch by the tuning databases (the shipped ones, or those a test puts in
    their place), also inside a module whose ``model_kernels`` set the model alone."""
    from jax_tsmm import _dispatch

    monkeypatch.setattr(_dispatch, "_model_only", [])


@pytest.fixture
def no_nvcc(monkeypatch):
    """As on a machine without the CUDA toolkit at run time: finding nvcc fails."""
    from jax_tsmm import _kernels

    def missing():
        raise _kernels.NvccNotFound("jax_tsmm needs nvcc (hidden by the test)")

    monkeypatch.setattr(_kernels, "nvcc", missing)
