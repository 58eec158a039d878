"""python -m jax_tsmm.explain: dispatch's choice for a shape, and the reason, on any machine."""

from __future__ import annotations

import dataclasses
import pathlib
import shlex

import pytest

from jax_tsmm import _dispatch, _kernels, _mtsm, explain
from jax_tsmm.codegen import Problem, default_config
from jax_tsmm.codegen import mtsm as mtsm_codegen

K = 1 << 22


def kernel_entry(problem, xla_s=2.0):
    return [{"k_min": 0, "k_tuned": K, "config": dataclasses.asdict(default_config(problem)), "tsmm_s": 1e-3,
             "tsmm_pct": 90.0, "xla_s": xla_s * 1e-3, "xla_pct": 45.0, "device": "NVIDIA H200", "date": "2026-11-27"}]


def xla_entry(k_tuned=K):
    return [{"k_min": 0, "k_tuned": k_tuned, "config": None, "tsmm_s": 1e-3, "tsmm_pct": 80.0, "xla_s": 0.8e-3,
             "xla_pct": 100.0, "source": "bench NVIDIA H100 80GB HBM3 2026-11-27"}]


@pytest.fixture
def database(monkeypatch):
    entries = {}
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)
    return entries


def test_each_reason_names_its_rule_and_measurement(database):
    """The database's kernel and XLA verdicts with their timings, the square and
    nearest-pair rules with the entry behind them, small K, the model; and the
    spec is select's."""
    database["atb:float64:20x20"] = kernel_entry(Problem("atb", "float64", 20, 20))
    database["ab:float64:10x10"] = xla_entry()
    database["ab:float64:32x1"] = xla_entry()
    cases = {  # (op, dtype, M, N, K): (XLA's dot?, words of the reason)
        ("atb", "float64", 20, 20, K): (False, ["its kernel measured fastest", "tuned NVIDIA H200 2026-11-27",
                                                "90.0 %"]),
        ("ab", "float64", 10, 10, K): (True, ["XLA's dot measured faster", "bench NVIDIA H100 80GB HBM3 2026-11-27"]),
        ("ab", "float64", 10, 20, K): (True, ["beside 10 x 10", "_beside_an_xla_square", "XLA's dot measured faster"]),
        ("ab", "float64", 30, 1, K): (True, ["ab:float64:32x1", "_near_an_xla_pair"]),
        ("ab", "float32", 30, 2, K): (False, ["the generator's model"]),
        ("ab", "float32", 7, 5, 1000): (True, ["the small-K rule"]),
        ("ab", "float16", 8, 8, K): (True, ["no kernels for float16"]),
    }
    for (op, dtype, m, n, k), (xla, words) in cases.items():
        choice = _dispatch.choose(op, dtype, m, n, k, 0, False)
        assert choice.spec == _dispatch.select(op, dtype, m, n, k, 0, False)
        assert (choice.spec is None) == xla, (op, dtype, m, n, choice.reason)
        for word in words:
            assert word in choice.reason, (op, dtype, m, n, choice.reason)


def test_mtsm_untuned_widths_say_which_neighbours_decided(database):
    """An untuned N between tuned widths: fitted from the wider one where both chose
    kernels, XLA's dot where one chose it; a tuned N gives its entry."""
    for width in (8, 16):
        problem = mtsm_codegen.MtsmProblem(False, "float32", width)
        config = dataclasses.asdict(mtsm_codegen.default_config(problem))
        database[_dispatch.mtsm_key(False, "float32", width)] = [{"k_min": 0, "k_tuned": 16384, "config": config}]
    database[_dispatch.mtsm_key(False, "float64", 8)] = xla_entry(16384)
    database[_dispatch.mtsm_key(False, "float64", 16)] = xla_entry(16384)
    fitted = _mtsm.choose("float32", False, 12, False, 16384)
    assert fitted.spec is not None and "the wider one's, fitted to N" in fitted.reason and "8 and 16" in fitted.reason
    assert _mtsm.choose("float32", False, 16, False, 16384).reason.startswith("the database: its kernel")
    xla = _mtsm.choose("float64", False, 12, False, 16384)
    assert xla.spec is None and "chose XLA's dot" in xla.reason
    assert "M = K = 16,384" in _mtsm.choose("float64", False, 8, False, 16384).reason


def test_a_kernel_faster_within_the_margin_is_named_as_such(database):
    """mtsm's tuner keeps XLA's dot unless a kernel is clearly faster: the reason says
    so (not that XLA's dot was faster), with the loops the entry was timed in."""
    database[_dispatch.mtsm_key(False, "float64", 8)] = [
        {"k_min": 0, "k_tuned": 16384, "config": None, "tsmm_s": 0.520e-3, "tsmm_pct": 91.7, "xla_s": 0.535e-3,
         "xla_pct": 89.3, "device": "NVIDIA H200", "date": "2026-11-29", "loop_seconds": 0.3}]
    choice = _mtsm.choose("float64", False, 8, False, 16384)
    assert choice.spec is None
    assert "its fastest kernel measured faster than XLA's dot by less than the tuner's margin" in choice.reason
    assert "tuned NVIDIA H200 2026-11-29 in loops of 0.3 s" in choice.reason


def test_the_command_prints_the_choice_for_a_named_gpu(database, capsys):
    database["ab:float64:32x1"] = xla_entry()
    explain.main(["ab", "float64", "30", "1", "--k", str(K), "--device", "NVIDIA H200", "--arch", "sm_90"])
    line = capsys.readouterr().out
    assert line.startswith("ab 30 x 1, K = 4,194,304, float64, on NVIDIA H200 (sm_90): XLA's dot. Why:")
    explain.main(["ab", "float32", "8", "36", "--k", str(K), "--device", ""])
    line = capsys.readouterr().out
    assert "(the architecture's database): kernel tsmm_ab_float32_m8_n36_" in line and "generator's model" in line
    explain.main(["mtsm", "float32", "4096", "3", "--k", "2048", "--transpose-a", "--device", ""])
    assert capsys.readouterr().out.startswith("Aᵀ X, A 2048 x 4096, N = 3, float32")


@pytest.mark.nvcc
@pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA")
def test_the_choice_says_whether_its_kernel_is_built_in(database):
    """A prebuilt kernel needs no compile (and no nvcc) at first use; the line says
    which, and which nvcc compiles the others."""
    line = explain.explain("atb", "float64", 8, 8, K, device="", arch="sm_90")  # the model's 8 x 8: prebuilt
    assert "; built into the extension)" in line, line
    line = explain.explain("atb", "float64", 8, 8, K, gram=True, device="", arch="sm_90")  # and its Gram twin
    assert line.startswith("atb (Gram matrix) 8 x 8") and "kernel tsmm_atb_gram_float64_m8_n8_" in line, line
    assert "; built into the extension)" in line, line
    line = explain.explain("atb", "float64", 9, 7, K, device="", arch="sm_90")
    assert "; compiled at first use by " in line, line
    line = explain.explain("mtsm", "float64", 4096, 8, 4096, device="", arch="sm_90")  # the model's N = 8: prebuilt
    assert "; built into the extension)" in line, line
    line = explain.explain("mtsm", "float64", 4096, 5, 4096, device="", arch="sm_90")
    assert "; compiled at first use by " in line, line


def test_without_nvcc_the_line_says_xla_serves_a_kernel_outside_the_prebuilt_set(database, no_nvcc):
    line = explain.explain("atb", "float64", 9, 7, K, device="", arch="sm_90")
    assert "compiled at first use, but no nvcc is found here: XLA's dot serves it until one is)" in line, line


def test_the_readme_example_prints_what_the_readme_shows(capsys):
    """The README's example, run on the shipped files, prints the README's text
    (wrapped there): a changed database or rule shows up here, not in a reader's run."""
    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
    _, _, rest = readme.partition("$ python -m jax_tsmm.explain ")
    assert rest, "the README shows no explain example"
    args, _, shown = rest.partition("\n")
    explain.main(shlex.split(args))
    assert capsys.readouterr().out.split() == shown.partition("```")[0].split()
