"""scripts/as_dispatched.py: of several bench reports, the latest row of each shape
timed with the kernel dispatch picks now."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib

import pytest

from jax_tsmm import _dispatch
from jax_tsmm.codegen import Problem, default_config
from jax_tsmm.codegen.mtsm import MtsmProblem
from jax_tsmm.codegen.mtsm import default_config as mtsm_default_config

ROOT = pathlib.Path(__file__).parents[1]
spec = importlib.util.spec_from_file_location("as_dispatched", ROOT / "scripts" / "as_dispatched.py")
as_dispatched = importlib.util.module_from_spec(spec)
spec.loader.exec_module(as_dispatched)

K = 1 << 22


def config_of(problem: Problem, **changes) -> dict:
    return dataclasses.asdict(dataclasses.replace(default_config(problem, "sm_90"), **changes))


def another_config(problem: Problem) -> dict:
    """The model's configuration of ``problem`` with another stage count: another kernel."""
    return config_of(problem, stages=2 if default_config(problem, "sm_90").stages != 2 else 3)


def row(op: str, m: int, n: int, config: dict | None, pct: float, dtype: str = "float64", **more) -> dict:
    return {"op": op, "dtype": dtype, "M": m, "N": n, "K": K, "config": config, "tsmm_pct": pct,
            "xla_pct": 50.0, "speedup": pct / 50.0, "tsmm_s": 1.0, "xla_s": 1.0, "bytes": 1, **more}


def report(rows: list[dict], device: str = "NVIDIA H200") -> dict:
    return {"device": device, "date": "2026-11-29", "loop_seconds": 0.02, "rows": rows}


def test_the_latest_row_of_todays_kernel_counts(monkeypatch):
    """A later row of another kernel (timed before the database changed) does not
    replace an earlier row of today's; a later row of today's does; a shape timed
    only with other kernels is named."""
    ab, atb, old = Problem("ab", "float64", 10, 10), Problem("atb", "float64", 20, 20), Problem("ab", "float64", 12, 12)
    entries = {"ab:float64:10x10": [{"k_min": 0, "k_tuned": K, "config": config_of(ab)}],
               "atb:float64:20x20": [{"k_min": 0, "k_tuned": K, "config": None, "xla_s": 1e-3, "tsmm_s": 2e-3}]}
    mtsm_config = dataclasses.asdict(mtsm_default_config(MtsmProblem(False, "float64", 5)))
    entries[_dispatch.mtsm_key(False, "float64", 5)] = [{"k_min": 0, "k_tuned": 16384, "config": mtsm_config}]
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)
    older = report([row("ab", 10, 10, config_of(ab), 91.0), row("atb", 20, 20, config_of(atb), 80.0),
                    row("ab", 12, 12, another_config(old), 70.0), row("mtsm", 16384, 5, mtsm_config, 95.0),
                    row("mtsm_t", 16384, 5, mtsm_config, 94.0)])  # Aᵀ X: no entry, the model's kernel is another
    newer = report([row("ab", 10, 10, another_config(ab), 60.0), row("atb", 20, 20, None, 40.0)])
    rows, device, missing = as_dispatched.as_dispatched([older, newer], ["older", "newer"])
    assert device == "NVIDIA H200"
    kept = {(r["op"], r["M"]): (r["report"], r["tsmm_pct"]) for r in rows}
    assert kept == {("ab", 10): ("older", 91.0), ("atb", 20): ("newer", 40.0), ("mtsm", 16384): ("older", 95.0)}
    assert missing == [("ab", "float64", 12, 12, K), ("mtsm_t", "float64", 16384, 5, K)]
    newer["rows"][0]["config"] = config_of(ab)  # today's kernel, timed again: the later row
    rows, _, _ = as_dispatched.as_dispatched([older, newer], ["older", "newer"])
    assert {(r["op"], r["M"]): r["report"] for r in rows}[("ab", 10)] == "newer"


def test_a_complex_row_on_its_real_view_is_a_kernel_of_its_own(monkeypatch):
    """The real view's kernel of a complex problem (the real problem's configuration)
    is not the native kernel of the same configuration."""
    config = config_of(Problem("atb", "float64", 20, 20))
    entries = {"atb:complex128:10x10": [{"k_min": 0, "k_tuned": K, "config": config, "real_view": True}]}
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)
    native = report([row("atb", 10, 10, config, 70.0, "complex128")])
    real_view = report([row("atb", 10, 10, config, 90.0, "complex128", real_view=True)])
    rows, _, missing = as_dispatched.as_dispatched([real_view, native], ["real view", "native"])
    assert [r["report"] for r in rows] == ["real view"] and missing == []


def test_reports_of_several_gpu_models_or_loop_lengths_are_refused():
    with pytest.raises(SystemExit, match="several GPU models"):
        as_dispatched.as_dispatched([report([]), report([], "NVIDIA H100 80GB HBM3")], ["a", "b"])
    with pytest.raises(SystemExit, match="loops of several lengths"):
        as_dispatched.as_dispatched([report([]), {**report([]), "loop_seconds": 0.3}], ["a", "b"])
