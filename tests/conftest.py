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


def pytest_collection_modifyitems(config, items):
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
