"""The CUDA lowering without a GPU: lowering for platform "cuda" works on any
machine, so CI sees which calls become kernels, that kernels outside the
prebuilt set are generated, compiled and cached, and that compiler failures
surface as Python errors."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

import jax_tsmm
from jax_tsmm import _dispatch, _kernels, _mtsm
from jax_tsmm.codegen import KernelSpec, Problem, default_config

pytestmark = [
    pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA"),
    pytest.mark.usefixtures("model_kernels"),  # each shape here reaches its kernel
]


def cuda_hlo(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def test_kernels_lower_to_ffi_calls():
    a = jnp.ones((1000, 8))
    c = jnp.ones((8, 8))
    assert "tsmm_atb" in cuda_hlo(jax_tsmm.atb, a, a)
    assert "tsmm_ab" in cuda_hlo(jax_tsmm.ab, a, c)


def test_ab_update_lowers_to_one_fused_call():
    """V - Q C: one custom call that aliases its result to V (no separate update);
    with beta = 0 V is not read and plain ab serves."""
    q, c, v = jnp.ones((1000, 8)), jnp.ones((8, 4)), jnp.ones((1000, 4))
    hlo = cuda_hlo(lambda q, c, v: jax_tsmm.ab(q, c, out=v, alpha=-1, beta=1), q, c, v)
    assert hlo.count("stablehlo.custom_call") == 1 and "@tsmm_ab_update" in hlo
    assert "output_operand_aliases" in hlo and "operand_index = 2" in hlo
    hlo = cuda_hlo(lambda q, c, v: jax_tsmm.ab(q, c, out=v, alpha=2), q, c, v)
    assert "@tsmm_ab(" in hlo and "@tsmm_ab_update" not in hlo


def test_atb_partials_are_a_second_result():
    """The launch grid is fixed at lowering and atb's partial sums are an XLA
    buffer: nothing is allocated during the call (CUDA-graph safe)."""
    hlo = cuda_hlo(jax_tsmm.atb, jnp.ones((100_000, 7)), jnp.ones((100_000, 9)))
    assert "@tsmm_atb" in hlo and "grid_k = " in hlo
    assert re.search(r"-> \(tensor<7x9xf64>, tensor<[1-9][0-9]*xf64>\)", hlo)


def test_ab_chunk_counters_are_a_second_result():
    """ab's kernels with bulk copies, or with Config.ring_takes_chunks, take their
    chunks of K from a counter per batch item, an XLA buffer like atb's partial sums
    (the handler zeroes it before each launch); other kernels get an empty one."""
    bulk = jnp.ones((100_000, 64)), jnp.ones((64, 1))
    assert default_config(Problem("ab", "float64", 64, 1), "sm_90").stage_copy == "bulk"
    assert re.search(r"-> \(tensor<100000x1xf64>, tensor<1xui32>\)", cuda_hlo(jax_tsmm.ab, *bulk))
    batched = cuda_hlo(jax.vmap(jax_tsmm.ab), *(jnp.stack([x] * 3) for x in bulk))
    assert re.search(r"-> \(tensor<3x100000x1xf64>, tensor<3xui32>\)", batched)
    for dtype, counters in (("float32", 0), ("float64", 1)):  # the model's cp.async rings: float64's take them
        config = default_config(Problem("ab", dtype, 7, 9), "sm_90")
        assert config.stage_copy == "vector" and config.ring_takes_chunks == bool(counters)
        hlo = cuda_hlo(jax_tsmm.ab, jnp.ones((100_000, 7), dtype), jnp.ones((7, 9), dtype))
        assert re.search(rf"-> \(tensor<100000x9x{dtype[0]}{dtype[5:]}>, tensor<{counters}xui32>\)", hlo)


def test_waves_multiply_the_launch_grid():
    """Config.waves, a launch parameter (the same kernel): the grid holds that many
    times the resident blocks, and never more blocks than chunks of K."""
    problem = Problem("ab", "float64", 20, 20)
    base = default_config(problem)
    grids = []
    for waves, k in ((1, 10**6), (8, 10**6), (8, 1000)):
        spec = KernelSpec(problem, dataclasses.replace(base, waves=waves))
        jax.clear_caches()  # the same shapes lowered again, with the forced kernel
        with _dispatch.forced(spec):
            hlo = cuda_hlo(jax_tsmm.ab, jnp.ones((k, 20)), jnp.ones((20, 20)))
        grids.append(int(re.search(r"grid_k = (\d+)", hlo).group(1)))
    assert grids[1] == 8 * grids[0]
    assert grids[2] == -(-1000 // spec.rows_per_chunk)


def test_grad_lowers_to_both_kernels():
    a = jnp.ones((1000, 8))
    hlo = cuda_hlo(jax.grad(lambda x: jnp.sum(jax_tsmm.atb(x, x))), a)
    assert "tsmm_ab" in hlo


@pytest.mark.parametrize(
    "shape_a, shape_b, dtype",
    [((1000, 200), (1000, 3), jnp.float32), ((1000, 4), (1000, 4), jnp.bfloat16), ((0, 4), (0, 4), jnp.float32)],
)
def test_problems_without_a_kernel_use_xla(shape_a, shape_b, dtype):
    hlo = cuda_hlo(jax_tsmm.atb, jnp.ones(shape_a, dtype), jnp.ones(shape_b, dtype))
    assert "tsmm_atb" not in hlo


_NEW_SHAPE = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, jax_tsmm
    a, b = jnp.ones((999, 29)), jnp.ones((999, 31))
    jax.jit(jax_tsmm.atb).trace(a, b).lower(lowering_platforms=("cuda",))
    print("lowered")
    """
)


def _fake_nvcc(tmp_path, compile_body: str) -> str:
    """An nvcc that logs each call, answers --version like the real one and
    compiles with ``compile_body``."""
    real = _kernels.nvcc()
    script = tmp_path / "nvcc"
    script.write_text(
        f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\n"
        f"case \"$1\" in --version) exec {real} --version;; esac\n{compile_body}\n"
    )
    script.chmod(0o755)
    return str(script)


def _run(env_extra: dict, cwd) -> subprocess.CompletedProcess:
    """A fresh process (empty in-memory caches), away from the source tree."""
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", _NEW_SHAPE], env=env, cwd=cwd, capture_output=True, text=True)


def test_without_nvcc_only_the_prebuilt_kernels_run(no_nvcc):
    """No nvcc at run time (the toolkit was on the machine that built the package):
    a call whose kernel is outside the prebuilt set lowers to XLA's dot, with a
    warning that says why; a prebuilt kernel (float64 8 x 8, the model's) still runs."""
    a, b = jnp.ones((997, 27)), jnp.ones((997, 23))
    c, v = jnp.ones((27, 23)), jnp.ones((997, 23))
    calls = {"tsmm_atb": lambda: cuda_hlo(jax_tsmm.atb, a, b),
             "tsmm_ab_update": lambda: cuda_hlo(lambda a, c, v: jax_tsmm.ab(a, c, out=v, beta=1), a, c, v),
             "tsmm_mtsm": lambda: cuda_hlo(jax_tsmm.mtsm, jnp.ones((995, 997)), b)}
    kernels = [_dispatch.select("atb", "float64", 27, 23, 997, 0, False),
               _dispatch.select("ab", "float64", 27, 23, 997, 0, False, update=True),
               _mtsm.select("float64", False, 23, False, _mtsm.problem_size(1, 995, 997))]
    assert not any(spec is None or spec.name in _kernels.prebuilt_names() for spec in kernels)
    for target, lower in calls.items():
        with pytest.warns(RuntimeWarning, match="until then XLA's dot serves"):
            hlo = lower()
        assert target not in hlo and "dot_general" in hlo, target
    prebuilt = jnp.ones((1000, 8), jnp.float64)
    assert _dispatch.select("atb", "float64", 8, 8, 1000, 0, False).name in _kernels.prebuilt_names()
    assert "tsmm_atb" in cuda_hlo(jax_tsmm.atb, prebuilt, prebuilt)


@pytest.fixture
def pip_site(tmp_path):
    """A site-packages holding the nvcc that `pip install 'jax[cuda13]'` brings
    (nvidia-cuda-nvcc, nvidia/cu13/bin/nvcc), its ``nvidia`` package a regular one
    so that it comes ahead of any other on the path."""
    site = tmp_path / "site-packages"
    pip_nvcc = site / "nvidia" / "cu13" / "bin" / "nvcc"
    pip_nvcc.parent.mkdir(parents=True)
    (site / "nvidia" / "__init__.py").write_text("")
    pip_nvcc.write_text("#!/bin/sh\n")
    pip_nvcc.chmod(0o755)
    return site


def test_the_nvcc_of_nvidias_pip_package_is_found(pip_site, tmp_path, monkeypatch):
    """Off PATH, and without $JAX_TSMM_NVCC, $CUDA_HOME or $CUDA_PATH."""
    site, pip_nvcc = pip_site, pip_site / "nvidia" / "cu13" / "bin" / "nvcc"
    for name in ("JAX_TSMM_NVCC", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    monkeypatch.syspath_prepend(str(site))
    _kernels.nvcc.cache_clear()
    try:
        assert _kernels.nvcc() == str(pip_nvcc)
    finally:
        _kernels.nvcc.cache_clear()


def test_the_build_finds_the_pip_packages_compiler_lowering_finds(pip_site):
    """CMakeLists.txt runs jax_tsmm/_pip_cuda.py as a script with the Python that
    builds, where no CUDA toolkit is found: it prints the home of that nvcc."""
    script = pathlib.Path(_kernels.__file__).with_name("_pip_cuda.py")
    found = subprocess.run([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(pip_site)},
                           capture_output=True, text=True, check=True)
    assert found.stdout.strip() == str(pip_site / "nvidia" / "cu13")


@pytest.mark.nvcc
def test_disk_cache_serves_a_second_process(tmp_path):
    cache = tmp_path / "cache"
    nvcc = _fake_nvcc(tmp_path, f'exec {_kernels.nvcc()} "$@"')
    first = _run({"JAX_TSMM_CACHE_DIR": str(cache), "JAX_TSMM_NVCC": nvcc}, tmp_path)
    assert first.returncode == 0, first.stderr
    cubins = list(cache.glob("*.cubin"))
    assert len(cubins) == 1 and "m29_n31" in cubins[0].name
    compiles = lambda: [c for c in (tmp_path / "calls").read_text().splitlines() if "-cubin" in c]
    assert len(compiles()) == 1
    second = _run({"JAX_TSMM_CACHE_DIR": str(cache), "JAX_TSMM_NVCC": nvcc}, tmp_path)
    assert second.returncode == 0, second.stderr
    assert len(compiles()) == 1  # nothing compiled the second time


@pytest.mark.nvcc
def test_broken_compiler_is_a_python_error(tmp_path):
    nvcc = _fake_nvcc(tmp_path, 'echo "fatal: this compiler is broken" >&2; exit 1')
    result = _run({"JAX_TSMM_CACHE_DIR": str(tmp_path / "cache"), "JAX_TSMM_NVCC": nvcc}, tmp_path)
    assert result.returncode != 0
    assert "KernelBuildError" in result.stderr
    assert "this compiler is broken" in result.stderr
    assert "tsmm_atb_float32_m29_n31" in result.stderr  # the kernel is named


def test_dispatch_follows_the_tuning_database(monkeypatch):
    """The entry of the K range holding K serves (XLA's dot where the tuner
    measured XLA faster); below every range, the lowest range's entry."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Problem, default_config

    config = dataclasses.asdict(default_config(Problem("atb", "float64", 7, 5)))
    entries = {"atb:float64:7x5": [{"k_min": 1000, "config": config},
                                   {"k_min": 100_000, "k_tuned": 100_000, "config": None}]}
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)

    def lowers_to_kernel(k):
        x, y = jax.ShapeDtypeStruct((k, 7), jnp.float64), jax.ShapeDtypeStruct((k, 5), jnp.float64)
        return "tsmm_atb" in cuda_hlo(jax_tsmm.atb, x, y)

    assert lowers_to_kernel(10) and lowers_to_kernel(5000)
    assert not lowers_to_kernel(100_000) and not lowers_to_kernel(10**6)


_fresh_rows = iter(range(4096, 8192))  # a new K for each lowering: lowering is cached by shape


def _lowers_to_kernel(monkeypatch, op: str, m: int, n: int, entries: dict) -> bool:
    """Whether float64 ``op`` of M x N, with the database ``entries``, lowers to our kernel."""
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)
    k = next(_fresh_rows)
    a = jax.ShapeDtypeStruct((k, m), jnp.float64)
    b = jax.ShapeDtypeStruct((k, n) if op == "atb" else (m, n), jnp.float64)
    return f"tsmm_{op}" in cuda_hlo(getattr(jax_tsmm, op), a, b)


def test_an_untuned_ab_pair_takes_xla_beside_a_square_that_chose_it(monkeypatch):
    """ab of 10 x 20, untuned, lowers to XLA's dot where 10 x 10 or 20 x 20 chose it
    at that K by a margin, and to the model's kernel where both chose kernels or
    XLA merely tied; atb's pair keeps its kernel beside any square."""
    def entry(op, m, n, kernel):
        config = dataclasses.asdict(default_config(Problem(op, "float64", m, n))) if kernel else None
        return [{"k_min": 0, "config": config}]

    def lowers_to_kernel(op, entries):
        return _lowers_to_kernel(monkeypatch, op, 10, 20, entries)

    for op in ("ab", "atb"):
        both = {f"{op}:float64:10x10": entry(op, 10, 10, True), f"{op}:float64:20x20": entry(op, 20, 20, True)}
        assert lowers_to_kernel(op, both)
        assert lowers_to_kernel(op, {**both, f"{op}:float64:20x20": entry(op, 20, 20, False)}) == (op == "atb")
        assert lowers_to_kernel(op, {**both, f"{op}:float64:10x10": entry(op, 10, 10, False)}) == (op == "atb")
        assert lowers_to_kernel(op, {})  # nothing tuned: the model's kernel
        tie = [{"k_min": 0, "config": None, "tsmm_s": 1.0, "xla_s": 0.97}]  # XLA by less than the spread
        assert lowers_to_kernel(op, {**both, f"{op}:float64:10x10": tie})


def test_an_untuned_ab_pair_follows_its_nearest_measured_pairs(monkeypatch):
    """float64 ab of 10 x 20, untuned, takes XLA's dot where the nearest pair with
    entries (in octaves of M plus octaves of N), or one of several as near, chose
    it by more than issue 4's tolerance, and keeps the model's kernel where they
    all chose kernels or XLA by less, whatever farther pairs chose; atb's pairs
    and float32's keep their kernels."""
    def entry(op, m, n, xla_s):
        config = dataclasses.asdict(default_config(Problem(op, "float64", m, n))) if xla_s > 1 else None
        return [{"k_min": 0, "config": config, "tsmm_s": 1.0, "xla_s": xla_s}]

    def lowers_to_kernel(op, m, n, pairs):
        entries = {f"{op}:float64:{pm}x{pn}": entry(op, pm, pn, xla_s) for (pm, pn), xla_s in pairs.items()}
        return _lowers_to_kernel(monkeypatch, op, m, n, entries)

    kernel, xla, tie = 1.2, 0.9, 0.99  # XLA's time against the kernel's
    assert lowers_to_kernel("ab", 10, 20, {(8, 16): kernel, (16, 32): xla, (10, 1): xla})
    assert not lowers_to_kernel("ab", 10, 20, {(8, 16): xla, (16, 32): kernel})
    assert lowers_to_kernel("ab", 10, 20, {(8, 16): tie})
    assert not lowers_to_kernel("ab", 8, 32, {(8, 16): kernel, (8, 64): xla})  # as near as each other
    assert lowers_to_kernel("ab", 8, 32, {(8, 16): kernel, (8, 64): kernel, (32, 8): xla})
    assert lowers_to_kernel("atb", 10, 20, {(8, 16): xla})
    float32_xla = {"k_min": 0, "config": None, "tsmm_s": 1.0, "xla_s": xla}
    monkeypatch.setattr(_dispatch, "database", lambda *_: {"ab:float32:8x16": [float32_xla]})
    assert _dispatch.select("ab", "float32", 10, 20, 1 << 20, 0, False) is not None


def test_an_untuned_outer_product_looks_at_its_wide_square_alone(monkeypatch):
    """ab of 1 x 20, untuned, keeps the model's kernel beside a 1 x 1 that chose
    XLA's dot by a margin, and takes XLA's dot where 20 x 20 chose it; 20 x 1
    still takes XLA's dot beside such a 1 x 1."""
    xla = [{"k_min": 0, "config": None, "tsmm_s": 1.0, "xla_s": 0.9}]
    kernel = [{"k_min": 0, "config": dataclasses.asdict(default_config(Problem("ab", "float64", 20, 20)))}]
    assert _lowers_to_kernel(monkeypatch, "ab", 1, 20, {"ab:float64:1x1": xla, "ab:float64:20x20": kernel})
    assert not _lowers_to_kernel(monkeypatch, "ab", 1, 20, {"ab:float64:1x1": kernel, "ab:float64:20x20": xla})
    assert not _lowers_to_kernel(monkeypatch, "ab", 20, 1, {"ab:float64:1x1": xla, "ab:float64:20x20": kernel})


def test_a_gpu_models_database_overrides_its_architectures_key_by_key(monkeypatch, tmp_path, tuned_dispatch):
    """An H200 takes its own file's entries from their lowest K range up (an sm_90
    range inside them was measured on another GPU) and the sm_90 file's below
    them and for other keys; another sm_90 GPU, or a lowering without one, takes
    sm_90's."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Config, KernelSpec, Problem, default_config

    problem = Problem("atb", "float64", 7, 5)
    config = dataclasses.asdict(default_config(problem))
    arch_entries = {"atb:float64:7x5": [{"k_min": 0, "config": config}, {"k_min": 1 << 20, "config": config}],
                    "ab:float64:7x5": [{"k_min": 0, "config": None}]}
    model_entries = {"atb:float64:7x5": [{"k_min": 1 << 18, "config": None}]}
    monkeypatch.setattr(_dispatch, "TUNING_DIR", tmp_path)
    assert _dispatch.database_path("sm_90", "NVIDIA H200").name == "sm_90.NVIDIA_H200.json"
    _dispatch.database_path("sm_90").write_text(json.dumps({"entries": arch_entries}))
    _dispatch.database_path("sm_90", "NVIDIA H200").write_text(json.dumps({"entries": model_entries}))

    def select(op, device, k=1 << 20):
        return _dispatch.select(op, "float64", 7, 5, k, 0, False, "sm_90", device)

    kernel = KernelSpec(problem, Config(**config))
    assert select("atb", "NVIDIA H200") is None
    assert select("atb", "NVIDIA H200", k=1 << 22) is None
    assert select("atb", "NVIDIA H200", k=1000) == kernel  # a range the model's file leaves to sm_90's
    assert select("ab", "NVIDIA H200") is None
    for device in ("", "NVIDIA H100 80GB HBM3"):
        assert select("atb", device) == kernel
        assert select("ab", device) is None


def test_every_file_the_package_ships_under_tuning_is_a_database_dispatch_reads():
    """A file there under another name, such as a device run's copy of a database
    (`tuned-sm_90.NVIDIA_H200.json`), would ship unread while the file it was
    meant to replace kept the old entries."""
    for path in sorted(_dispatch.TUNING_DIR.iterdir()):
        db = json.loads(path.read_text())
        assert path in (_dispatch.database_path(db["arch"]), _dispatch.database_path(db["arch"], db["device"])), path.name


def test_atb_takes_xla_at_multiples_of_a_k_where_a_sweep_found_it_faster(monkeypatch):
    """A kernel entry marked with xla_faster_at gives way to XLA's Aᵀ B at multiples
    of that K, except from the larger K the kernel was timed faster at; an XLA
    entry so marked also serves at those multiples, beside its own timed K's."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Problem, default_config

    config = dataclasses.asdict(default_config(Problem("atb", "float64", 7, 5)))
    entries = {"atb:float64:7x5": [{"k_min": 1 << 20, "k_tuned": 1 << 24, "config": config, "xla_faster_at": 1 << 22}],
               "atb:float64:6x5": [{"k_min": 1 << 20, "k_tuned": 1 << 24, "config": None, "xla_faster_at": 1 << 22}]}
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)

    def lowered(m, k):
        return "tsmm_atb" in cuda_hlo(jax_tsmm.atb, jax.ShapeDtypeStruct((k, m), jnp.float64),
                                      jax.ShapeDtypeStruct((k, 5), jnp.float64))

    assert not lowered(7, 1 << 22) and not lowered(7, 3 << 22)
    assert lowered(7, (1 << 22) + 1) and lowered(7, 1 << 21)
    assert lowered(7, 1 << 24) and lowered(7, 5 << 22)  # the kernel was timed faster at 2^24
    assert not lowered(6, 1 << 22) and not lowered(6, 1 << 25)
    assert lowered(6, (1 << 22) + 1)  # the model's kernel, as at any K XLA was not timed fast at


def test_a_gram_matrix_keeps_atbs_kernel_where_xla_beat_it_at_an_aligned_k(monkeypatch):
    """XLA's win over atb's kernel at an aligned K (xla_faster_at) sends atb there to
    XLA's dot, not the Gram matrix, which runs that kernel carried (it reads one
    operand, and XLA's Aᵀ A is the slower)."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Problem, default_config

    config = dataclasses.asdict(default_config(Problem("atb", "float64", 7, 7)))
    entries = {"atb:float64:7x7": [{"k_min": 1 << 20, "k_tuned": 1 << 24, "config": config, "xla_faster_at": 1 << 22}]}
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)

    def chosen(gram):
        return _dispatch.select("atb", "float64", 7, 7, 1 << 22, 0, False, gram=gram, real_view=False)

    assert chosen(gram=False) is None
    assert chosen(gram=True) is not None and chosen(gram=True).problem.gram


def test_where_an_atb_xla_entry_does_not_hold_the_kernel_timed_nearest_serves(monkeypatch):
    """At K without the power-of-two factor of an atb XLA entry's timed K, the key's
    kernel entry timed at the K nearest (by ratio, within NEAREST_KERNEL_REACH)
    serves, else the model's kernel; at multiples of that factor, XLA's dot."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Problem, default_config
    from jax_tsmm.codegen.search import candidates

    problem = Problem("atb", "float64", 7, 5)
    model = dataclasses.asdict(default_config(problem))
    small, large = [config for config in map(dataclasses.asdict, candidates(problem, 4, "sm_90")) if config != model][:2]
    entries = [{"k_min": 0, "k_tuned": 1 << 16, "config": small},
               {"k_min": 1 << 18, "k_tuned": 1 << 20, "config": None},
               {"k_min": 1_300_001, "k_tuned": 1_300_001, "config": large}]
    monkeypatch.setattr(_dispatch, "database", lambda *_: {"atb:float64:7x5": entries})

    def chosen(k):
        spec = _dispatch.select("atb", "float64", 7, 5, k, 0, False)
        return spec and dataclasses.asdict(spec.config)

    assert chosen(1 << 20) is None
    assert chosen(1_000_003) == large and chosen(2**17 + 1) == small
    assert chosen(300_007) == model  # 4.3 times below 1.3e6 and 4.6 above 2^16


def test_small_k_goes_to_xla_where_nothing_was_tuned_that_small(monkeypatch):
    """Below SMALL_K (complex: SMALL_K_COMPLEX), atb and ab without entries, whose
    entries start higher, or whose serving entry was timed at 4 K or more, use
    XLA's dot (atb at multiples of 2^10 only, where XLA measured fast); K at or
    above the entries' ranges, or near the K an entry was timed at, keeps the
    kernels."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Problem, default_config

    def kernel(op, dtype):
        return [{"k_min": 1 << 22, "k_tuned": 1 << 22, "config": dataclasses.asdict(default_config(Problem(op, dtype, 7, 5)))}]

    entries = {f"{op}:{dtype}:7x5": kernel(op, dtype) for op in ("atb", "ab") for dtype in ("float32", "complex64")}
    entries["ab:float64:7x5"] = [{**kernel("ab", "float64")[0], "k_min": 0, "k_tuned": 1 << 16}]
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)

    def lowered(fn, dtype, k):
        x, y, c = (jax.ShapeDtypeStruct(s, dtype) for s in ((k, 7), (k, 5), (7, 5)))
        return "tsmm_" in cuda_hlo(fn, x, y if fn is jax_tsmm.atb else c)

    assert not lowered(jax_tsmm.atb, jnp.float32, 1 << 16) and not lowered(jax_tsmm.ab, jnp.float32, 1 << 16)
    assert not lowered(jax_tsmm.ab, jnp.float32, 1000)
    assert not lowered(jax_tsmm.atb, jnp.float32, 1 << 12) and not lowered(jax_tsmm.atb, jnp.float32, 3 << 10)
    assert lowered(jax_tsmm.atb, jnp.float32, 65537)  # XLA's Aᵀ B is slow at odd K
    assert lowered(jax_tsmm.atb, jnp.float32, 4099)
    assert lowered(jax_tsmm.atb, jnp.float32, 1 << 17) and lowered(jax_tsmm.ab, jnp.float32, 1 << 17)
    assert lowered(jax_tsmm.atb, jnp.complex64, 1 << 16) and lowered(jax_tsmm.ab, jnp.complex64, 1 << 16)
    assert not lowered(jax_tsmm.atb, jnp.complex64, 1 << 14) and not lowered(jax_tsmm.ab, jnp.complex64, (1 << 15) - 1)
    assert lowered(jax_tsmm.atb, jnp.complex64, (1 << 14) + 1)
    assert lowered(jax_tsmm.atb, jnp.complex64, 1 << 15) and lowered(jax_tsmm.ab, jnp.complex64, 1 << 15)
    assert not lowered(jax_tsmm.ab, jnp.float64, 1 << 14) and lowered(jax_tsmm.ab, jnp.float64, (1 << 14) + 1)
    # No entry: XLA's dot at small K, the model's kernel above; the model's alone under model_only.
    monkeypatch.setattr(_dispatch, "_model_only", [])  # out of this module's model_kernels
    assert _dispatch.select("ab", "float32", 6, 5, 1000, 0, False) is None
    assert _dispatch.select("ab", "float32", 6, 5, 1 << 17, 0, False) is not None
    monkeypatch.setattr(_dispatch, "database", lambda *_: {})  # as database() has it under model_only
    with _dispatch.model_only():
        assert _dispatch.select("ab", "float32", 6, 5, 1000, 0, False) is not None


def test_atb_uses_xla_only_at_k_with_the_timed_power_of_two_factor(monkeypatch):
    """XLA's Aᵀ B measured fast at K = 2^16 is trusted at multiples of 2^16 only;
    elsewhere the kernel serves. ab's XLA entries hold for every K of their range."""
    from jax_tsmm import _dispatch

    xla = [{"k_min": 1 << 16, "k_tuned": 1 << 16, "config": None}]
    monkeypatch.setattr(_dispatch, "database", lambda *_: {"atb:float64:7x5": xla, "ab:float64:7x5": xla})
    x, y, c = (jax.ShapeDtypeStruct(s, jnp.float64) for s in ((3 << 16, 7), (3 << 16, 5), (7, 5)))
    assert "tsmm_atb" not in cuda_hlo(jax_tsmm.atb, x, y)
    x, y = jax.ShapeDtypeStruct((65537, 7), jnp.float64), jax.ShapeDtypeStruct((65537, 5), jnp.float64)
    assert "tsmm_atb" in cuda_hlo(jax_tsmm.atb, x, y)
    assert "tsmm_ab" not in cuda_hlo(jax_tsmm.ab, x, c)



def test_one_value_as_both_operands_lowers_to_the_gram_kernel():
    """atb(v, v), one value passed as both operands (a Gram matrix), lowers to the
    kernel that stages it once (``Problem.gram``): under vmap along any axis (``gram_p``
    moves it once), and as a complex problem's real view. Two values, though of one shape, lower to the kernel of two."""
    def kernel(fn, *args):
        names = re.findall(r'kernel = "(tsmm_atb\w*)"', cuda_hlo(fn, *args))
        assert len(names) == 1
        return names[0]

    v, w = jnp.ones((1 << 18, 8)), jnp.ones((1 << 18, 8))
    gram = kernel(lambda x: jax_tsmm.atb(x, x), v)
    assert gram.startswith("tsmm_atb_gram_float64_m8_n8_")
    assert gram == kernel(jax.vmap(lambda x: jax_tsmm.atb(x, x)), jnp.ones((3, 1 << 18, 8)))
    assert gram == kernel(jax.vmap(lambda x: jax_tsmm.atb(x, x), in_axes=1), jnp.ones((1 << 18, 3, 8)))
    assert not kernel(jax_tsmm.atb, v, w).startswith("tsmm_atb_gram")
    assert not kernel(lambda x: jax_tsmm.atb(x, x + 0), v).startswith("tsmm_atb_gram")
    complex_gram = kernel(lambda x: jax_tsmm.atb(x, x, conj=True), jnp.ones((1 << 18, 16), jnp.complex128))
    assert complex_gram.startswith("tsmm_atb_gram_float64_m32_n32_")  # the model's real view


def test_the_gradient_of_a_gram_matrix_lowers_to_its_kernel_and_one_ab():
    """grad through atb(v, v) (``gram_p``): the forward Gram matrix on its kernel and
    the backward pass one ab kernel (the bilinear rule's transposes took two)."""
    v = jnp.ones((1 << 18, 8))
    hlo = cuda_hlo(jax.grad(lambda x: jnp.sum(jax_tsmm.atb(x, x) ** 2)), v)
    kernels = re.findall(r'kernel = "(tsmm_\w+)"', hlo)
    assert len(kernels) == 2 and kernels[0].startswith("tsmm_atb_gram_float64_m8_n8_")
    assert kernels[1].startswith("tsmm_ab_float64_m8_n8_")


def test_complex_conjugated_atb_sets_aside_an_xla_entry_of_its_unconjugated_product(monkeypatch):
    """An atb entry that chose XLA's dot timed XLA's Aᵀ B: for Aᴴ B the key's kernel
    entry timed nearest K serves, else the model's kernel; below SMALL_K_COMPLEX
    the small-K rule stands, and so does a product of a single column. A Gram
    matrix takes its key's entries, kernels carried to it (``carried_to_gram``), XLA's
    dot where the entry chose it."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Config, Problem, carried_to_gram
    from jax_tsmm.codegen.search import candidates

    problem = Problem("atb", "complex64", 6, 6)
    timed = dataclasses.asdict(candidates(problem, 1, "sm_90")[0])
    entries = [{"k_min": 0, "k_tuned": 1 << 19, "config": timed},
               {"k_min": 1 << 20, "k_tuned": 1 << 20, "config": None}]
    monkeypatch.setattr(_dispatch, "database", lambda *_: {"atb:complex64:6x6": entries})

    def chosen(k, conj, gram=False):
        spec = _dispatch.select("atb", "complex64", 6, 6, k, 0, conj, gram=gram, real_view=False)
        return spec and spec.config

    assert chosen(1 << 20, conj=False) is None and chosen(1 << 20, conj=False, gram=True) is None
    assert chosen(1 << 20, conj=True) == Config(**timed)
    assert chosen(1 << 24, conj=True) == default_config(dataclasses.replace(problem, conj=True))  # 2^19 too far
    assert chosen(1 << 10, conj=True) is None
    gram = Problem("atb", "complex64", 6, 6, conj=True, gram=True)
    assert chosen(1 << 20, conj=True, gram=True) == carried_to_gram(gram, Config(**timed), "sm_90")
    assert chosen(1 << 24, conj=True, gram=True) == default_config(gram, "sm_90")
    column = {"k_min": 0, "k_tuned": 1 << 20, "config": None}
    monkeypatch.setattr(_dispatch, "database", lambda *_: {"atb:complex64:1x6": [column]})
    assert _dispatch.select("atb", "complex64", 1, 6, 1 << 20, 0, True, real_view=False) is None


def test_a_gram_matrix_tuned_as_its_own_operation(monkeypatch):
    """A Gram matrix's own entries (op "gram", timed as Aᴴ A for a complex dtype:
    ``named_problem``) serve it ahead of atb's carried ones, XLA's dot where they
    chose it (at K aligned as it was timed), the small-K rule below their ranges;
    atb's own calls keep atb's entries."""
    from jax_tsmm import _dispatch
    from jax_tsmm.codegen import Config, Problem
    from jax_tsmm.codegen.search import candidates
    from jax_tsmm.codegen.spec import named_problem, problem_key

    gram = named_problem("gram", "complex128", 16, 16)
    assert gram == Problem("atb", "complex128", 16, 16, conj=True, gram=True)
    assert problem_key(gram) == "gram:complex128:16x16" and named_problem("gram", "float64", 8, 8).conj is False
    pair = dataclasses.asdict(candidates(Problem("atb", "complex128", 16, 16), 1, "sm_90")[0])
    triangle = [c for c in candidates(gram, 12, "sm_90") if c.triangle][0]
    database = {"atb:complex128:16x16": [{"k_min": 0, "k_tuned": 1 << 22, "config": pair}],
                "gram:complex128:16x16": [
                    {"k_min": 1 << 17, "k_tuned": 1 << 20, "config": None},
                    {"k_min": 1 << 21, "k_tuned": 3 << 20, "config": dataclasses.asdict(triangle)}]}
    monkeypatch.setattr(_dispatch, "database", lambda *_: database)

    def chosen(k, gram=True):
        spec = _dispatch.select("atb", "complex128", 16, 16, k, 0, True, gram=gram, real_view=False)
        return spec and spec.config

    assert chosen(3 << 20) == triangle
    assert chosen(1 << 20) is None and chosen(5 << 18) == triangle  # XLA's at K aligned as it was timed
    assert chosen(1 << 10) is None  # the small-K rule
    assert chosen(3 << 20, gram=False) == Config(**pair)
    monkeypatch.setattr(_dispatch, "database", lambda *_: {"atb:complex128:16x16": database["atb:complex128:16x16"]})
    assert chosen(3 << 20) != triangle and not chosen(3 << 20).triangle  # atb's carried (carried_to_gram)
