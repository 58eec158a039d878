"""Complex products through their real view: a complex (K, M) matrix is bit for bit
a real (K, 2M) one, so the real kernels of twice the widths compute them (see
``jax_tsmm._dispatch``). On the CPU: dispatch, the expansion of C and the
combination of atb's real result, and the CUDA lowering; on a GPU (``gpu``) the
results through the public functions against the complex128 reference."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsmm
from jax_tsmm import _cuda, _dispatch, _kernels, tune
from jax_tsmm._primitives import ab_p, ab_update_p
from jax_tsmm.codegen import Config, InvalidSpec, KernelSpec, Problem, carried_to_update, default_config, validate
from jax_tsmm.codegen.model import occupancy_ok
from jax_tsmm.codegen.spec import has_bulk_copies, key_problem
from reference import ab_ref, assert_close, magnitude, poison, random_operand, to_wide, unit_roundoff

REAL_OF = {"complex64": "float32", "complex128": "float64"}


def select(op, dtype, m, n, k=10007, conj=False, **kwargs):
    return _dispatch.select(op, dtype, m, n, k, 0, conj, "sm_90", **kwargs)


def real_view(x: np.ndarray) -> np.ndarray:
    return x.view(REAL_OF[x.dtype.name])


@pytest.fixture
def model_dispatch():
    """Dispatch by the model alone, for one test (conftest's ``model_kernels`` would
    hold for the rest of the module, whose database tests need the database)."""
    with _dispatch.model_only():
        yield


# --- the expansion and the combination, in NumPy terms --------------------------------


@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_combined_real_product_is_the_complex_one(conj, batch):
    rng = np.random.default_rng()
    a = random_operand(rng, batch + (37, 5), "complex128")
    b = random_operand(rng, batch + (37, 3), "complex128")
    r = np.swapaxes(real_view(a), -1, -2) @ real_view(b)
    got = np.asarray(_cuda.combine_complex(jnp.asarray(r), conj))
    want = np.swapaxes(a.conj() if conj else a, -1, -2) @ b
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_real_view_times_expanded_c_is_the_complex_product(conj, batch):
    rng = np.random.default_rng()
    a = random_operand(rng, batch + (37, 5), "complex128")
    c = random_operand(rng, batch + (5, 3), "complex128")
    expanded = np.asarray(_cuda.expand_complex(jnp.asarray(c), conj))
    assert expanded.shape == batch + (10, 6) and expanded.dtype == np.float64
    got = np.ascontiguousarray(real_view(a) @ expanded).view(np.complex128)
    want = (a.conj() if conj else a) @ c
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


# --- dispatch ---------------------------------------------------------------------------


def test_model_runs_complex_problems_on_tensor_cores_as_their_real_view(model_dispatch):
    """Without a database entry, the real view serves where its real problem's model
    kernel uses DMMA (ab: from real rows of 16 whatever N); narrower problems stay on
    their complex kernels, and so does
    complex64 atb whose real result exceeds 64 x 64 entries."""
    for dtype in ("complex64", "complex128"):
        for conj in (False, True):
            spec = select("atb", dtype, 8, 8, conj=conj)
            assert spec.problem == Problem("atb", REAL_OF[dtype], 16, 16) and spec.config.mma
            assert _dispatch.is_real_view(spec, dtype)
        assert select("atb", dtype, 2, 2).problem == Problem("atb", dtype, 2, 2)
    assert select("ab", "complex128", 16, 16, update=True).problem == Problem("ab", "float64", 32, 32, update=True)
    assert select("ab", "complex128", 64, 64).problem == Problem("ab", "float64", 128, 128)
    assert select("ab", "complex128", 7, 7).problem == Problem("ab", "complex128", 7, 7)
    # narrow out from real rows of 16 (model.AB_MMA_MIN_M), whose complex FMA kernels hold few threads
    assert select("ab", "complex128", 8, 1).problem == Problem("ab", "float64", 16, 2)
    assert select("ab", "complex64", 40, 1).problem == Problem("ab", "float32", 80, 2)
    # wide complex128 atb (on sm_90 with bulk copies where they fit); too wide for the real
    # kernels; complex64 beyond 64 x 64 real entries; ruled out by the caller:
    assert select("atb", "complex128", 13, 48).problem == Problem("atb", "float64", 26, 96)
    wide = select("atb", "complex128", 37, 37)
    assert wide.problem == Problem("atb", "float64", 74, 74) and wide.config.stage_copy == "bulk"
    assert select("atb", "complex128", 64, 40).problem == Problem("atb", "float64", 128, 80)
    assert select("atb", "complex128", 65, 30).problem == Problem("atb", "complex128", 65, 30)
    assert select("atb", "complex64", 13, 48).problem == Problem("atb", "float32", 26, 96)
    assert select("atb", "complex64", 33, 33).problem == Problem("atb", "complex64", 33, 33)
    native = select("ab", "complex128", 16, 16, update=True, real_view=False)
    assert native.problem == Problem("ab", "complex128", 16, 16, update=True)
    assert not _dispatch.is_real_view(native, "complex128")
    assert select("atb", "float64", 5, 3).problem == Problem("atb", "float64", 5, 3)


def _config(problem: Problem) -> dict:
    return dataclasses.asdict(default_config(problem))


def test_database_entries_choose_the_real_view(monkeypatch):
    """The complex key's entry decides: its real view (with the real kernel it timed),
    its native kernel, or XLA. Without one, the model's real view takes the real
    problem's tuned kernel, but not the real problem's XLA: that was timed against
    the real dtype's dot."""
    timed_config = dataclasses.replace(default_config(Problem("atb", "float32", 10, 6)), blocks_per_sm=3)
    tuned_config = dataclasses.replace(default_config(Problem("ab", "float64", 32, 32)), blocks_per_sm=1)
    native = _config(Problem("atb", "complex128", 5, 3))
    entries = {
        "atb:complex64:5x3": [{"k_min": 0, "config": dataclasses.asdict(timed_config), "real_view": True}],
        "atb:float32:10x6": [{"k_min": 0, "config": None}],
        "atb:complex128:5x3": [{"k_min": 0, "config": native}],
        "ab:complex128:5x3": [{"k_min": 0, "config": None}],
        "ab:float64:32x32": [{"k_min": 0, "config": dataclasses.asdict(tuned_config)},
                             {"k_min": 1 << 20, "k_tuned": 1 << 20, "config": None}],
    }
    monkeypatch.setattr(_dispatch, "_database_file", lambda path: entries)
    assert select("atb", "complex64", 5, 3, k=1000, conj=True) == KernelSpec(Problem("atb", "float32", 10, 6), timed_config)
    assert select("atb", "complex128", 5, 3) == KernelSpec(Problem("atb", "complex128", 5, 3), Config(**native))
    assert select("ab", "complex128", 5, 3) is None
    real = Problem("ab", "float64", 32, 32)
    assert select("ab", "complex128", 16, 16, k=100_000) == KernelSpec(real, tuned_config)  # no entry: the model
    assert select("ab", "complex128", 16, 16, k=1000) is None  # no entry, small K: XLA
    assert select("ab", "complex128", 16, 16, k=1 << 21) == KernelSpec(real, default_config(real, "sm_90"))
    assert select("ab", "float64", 32, 32, k=1 << 21) is None
    with _dispatch.model_only():
        assert select("atb", "complex64", 5, 3).problem.dtype == "complex64"


def test_the_model_runs_complex128_atb_57_to_64_by_gauss():
    """Without entries, complex128 atb with both widths in 57..64 runs by Gauss's
    products on sm_90 (model.GAUSS_ATB_WIDTHS: 8-warp 4x2 tiles, bulk copies inline),
    not as its real view; narrower, and without bulk copies, as before."""
    with _dispatch.model_only():
        for m, n, conj in ((57, 64, False), (60, 58, True), (64, 64, False)):
            spec = select("atb", "complex128", m, n, conj=conj)
            assert spec.problem == Problem("atb", "complex128", m, n, conj=conj)
            assert spec.config.gauss and spec.config.stage_copy == "bulk_inline"
            validate(spec)
            assert spec.threads == 256 and spec.estimated_registers() <= 255
        assert select("atb", "complex128", 56, 64).problem.dtype == "float64"  # 7 blocks: the real view
        assert not select("atb", "complex64", 60, 60).config.gauss  # complex128 only
    assert not default_config(Problem("atb", "complex128", 60, 60)).gauss  # any architecture: no bulk copies


def test_the_update_without_entries_runs_plain_abs_kernel_carried(monkeypatch):
    """ab's fused update takes its own entry, else its real view's update entry, else
    plain ab's kernel entry of its shape carried to the update (the real view's, where
    that entry chose it); where plain ab's entry chose XLA, the model's kernel, which
    is itself plain ab's model kernel carried. A complex beta rules the real view out."""
    def plain(problem, **changes):
        return dataclasses.replace(default_config(problem, "sm_90"), blocks_per_sm=1, **changes)

    def update(problem):
        return dataclasses.replace(problem, update=True)

    f64_24, f64_20, f32_20 = (Problem("ab", "float64", 24, 24), Problem("ab", "float64", 20, 20),
                              Problem("ab", "float32", 20, 20))
    own = plain(f64_20, stages=2)
    entries = {
        "ab:float64:24x24": [{"k_min": 0, "config": dataclasses.asdict(plain(f64_24))}],
        "ab:float64:20x20": [{"k_min": 0, "config": dataclasses.asdict(plain(f64_20))}],
        "ab_update:float64:20x20": [{"k_min": 0, "config": dataclasses.asdict(own)}],
        "ab:float64:28x28": [{"k_min": 0, "config": None}],
        "ab:complex128:12x12": [{"k_min": 0, "config": dataclasses.asdict(plain(f64_24, stages=4)), "real_view": True}],
        "ab:complex64:10x10": [{"k_min": 0, "config": dataclasses.asdict(plain(f32_20)), "real_view": True}],
        "ab_update:float32:20x20": [{"k_min": 0, "config": dataclasses.asdict(plain(f32_20, stages=2))}],
    }
    monkeypatch.setattr(_dispatch, "_database_file", lambda path: entries)
    assert select("ab", "float64", 24, 24, update=True) == KernelSpec(
        update(f64_24), carried_to_update(update(f64_24), plain(f64_24)))
    assert select("ab", "float64", 20, 20, update=True) == KernelSpec(update(f64_20), own)
    f64_28 = Problem("ab", "float64", 28, 28, update=True)
    assert select("ab", "float64", 28, 28) is None
    assert select("ab", "float64", 28, 28, update=True) == KernelSpec(f64_28, default_config(f64_28, "sm_90"))
    assert default_config(f64_28, "sm_90") == carried_to_update(f64_28, default_config(Problem("ab", "float64", 28, 28), "sm_90"))
    assert select("ab", "complex128", 12, 12, update=True) == KernelSpec(
        update(f64_24), carried_to_update(update(f64_24), plain(f64_24, stages=4)))
    assert select("ab", "complex64", 10, 10, update=True) == KernelSpec(update(f32_20), plain(f32_20, stages=2))
    native = select("ab", "complex64", 10, 10, update=True, real_view=False)
    assert native.problem == Problem("ab", "complex64", 10, 10, update=True)


def test_carried_kernels_keep_their_kind_and_fit_an_sm():
    """carried_to_update keeps plain ab's kernel (its kind, tiles, copies and
    mapping), only shrinking its ring (rows per stage, stages, blocks per SM) or
    staging out where it did not, and returns a valid kernel within an SM's share:
    for the database's plain ab entries and the model's kernels on sm_90."""
    configs = [(Problem("ab", dtype, m, m), default_config(Problem("ab", dtype, m, m), "sm_90"))
               for dtype in ("float64", "float32") for m in (3, 13, 24, 40, 57, 64, 100, 128)]
    for key, entries in _dispatch.database("sm_90").items():
        if key.startswith("ab:") and entries[-1]["config"] is not None:
            plain = key_problem(key)
            problem = _dispatch.real_view_problem(plain) if entries[-1].get("real_view") else plain
            configs.append((problem, Config(**entries[-1]["config"])))
    assert len(configs) > 100  # the shipped database's entries are among them
    carried_count = 0
    for problem, config in configs:
        target = dataclasses.replace(problem, update=True)
        try:
            carried = carried_to_update(target, config)
        except InvalidSpec:
            continue
        carried_count += 1
        spec = KernelSpec(target, carried)
        validate(spec)
        assert occupancy_ok(spec), spec.name
        kept = ("tile_m", "tile_n", "row_groups", "mapping", "mma", "tf32x3", "wgmma", "gauss", "stage_copy")
        assert all(getattr(carried, f) == getattr(config, f) for f in kept), spec.name
        assert carried.stage_out >= config.stage_out and carried.stages <= config.stages
        assert carried.rows_per_stage <= config.rows_per_stage and carried.blocks_per_sm <= config.blocks_per_sm
    assert carried_count >= 0.8 * len(configs)  # 182 of 202 on 2026-11-26: the others need a larger ring than one pass


def test_forced_specs_serve_the_call_or_its_real_view(model_dispatch):
    native = KernelSpec(Problem("atb", "complex128", 8, 8, conj=True), default_config(Problem("atb", "complex128", 8, 8, conj=True)))
    with _dispatch.forced(native):
        assert select("atb", "complex128", 8, 8, conj=True) == native
        assert select("atb", "complex128", 8, 8).problem == Problem("atb", "float64", 16, 16)
    real = KernelSpec(Problem("atb", "float32", 10, 6), default_config(Problem("atb", "float32", 10, 6)))
    with _dispatch.forced(real):
        assert select("atb", "complex64", 5, 3, conj=True) == real
    update = Problem("ab", "float64", 10, 6, update=True)
    with _dispatch.forced(KernelSpec(update, default_config(update))):
        assert select("ab", "complex128", 5, 3, update=True).problem == update
        assert select("ab", "complex128", 5, 3, update=True, real_view=False).problem.dtype == "complex128"


def test_bench_rows_of_the_real_view_become_real_view_entries():
    real = _config(Problem("atb", "float64", 10, 6))
    row = {"op": "atb", "dtype": "complex128", "M": 5, "N": 3, "K": 10**7, "config": real, "real_view": True,
           "tsmm_s": 1.0, "xla_s": 2.0, "tsmm_pct": 90.0, "xla_pct": 45.0}
    lost = dict(row, M=7, tsmm_s=3.0)
    entries = tune.entries_from_bench([{"device": "GPU", "date": "2026-11-23", "rows": [row, lost]}])
    assert entries["atb:complex128:5x3"][0]["real_view"] and entries["atb:complex128:5x3"][0]["config"] == real
    assert entries["atb:complex128:7x3"][0]["config"] is None and "real_view" not in entries["atb:complex128:7x3"][0]


# --- the CUDA lowering ------------------------------------------------------------------

needs_extension = pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA")


def cuda_hlo(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.fixture
def no_compiling(monkeypatch):
    """The lowering's structure is under test here, not the kernels' source."""
    monkeypatch.setattr(_kernels, "library_for", lambda spec, arch: "")


def operands(*shapes, dtype=jnp.complex128):
    return tuple(jax.ShapeDtypeStruct(shape, dtype) for shape in shapes)


@needs_extension
@pytest.mark.usefixtures("model_dispatch", "no_compiling")
def test_atb_lowers_to_the_real_product_and_its_combination():
    a, b = operands((4, 10007, 8), (1, 10007, 6))
    hlo = cuda_hlo(lambda a, b: jax_tsmm.atb(a, b, conj=True), a, b)
    assert hlo.count("stablehlo.custom_call") == 1 and "real_view = true" in hlo
    assert "tsmm_atb_float64_m16_n12" in hlo
    assert "(tensor<4x10007x8xcomplex<f64>>, tensor<1x10007x6xcomplex<f64>>) -> (tensor<4x16x12xf64>, tensor<" in hlo
    assert "stablehlo.complex" in hlo and "tensor<4x8x6xcomplex<f64>>" in hlo


@needs_extension
@pytest.mark.usefixtures("model_dispatch", "no_compiling")
def test_ab_lowers_with_c_expanded():
    a, c, y = operands((10007, 16), (16, 12), (10007, 12))
    hlo = cuda_hlo(jax_tsmm.ab, a, c)
    assert "@tsmm_ab(" in hlo and "real_view = true" in hlo
    assert "(tensor<10007x16xcomplex<f64>>, tensor<32x24xf64>) -> (tensor<10007x12xcomplex<f64>>, tensor<" in hlo
    hlo = cuda_hlo(lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=2 - 1j, beta=-1), a, c, y)
    assert "@tsmm_ab_update" in hlo and "real_view = true" in hlo and "operand_index = 2" in hlo
    assert "alpha_real = 1.0" in hlo and "beta_real = -1.0" in hlo  # alpha went into C
    assert "tensor<32x24xf64>, tensor<10007x12xcomplex<f64>>) -> (tensor<10007x12xcomplex<f64>>, tensor<" in hlo


@needs_extension
@pytest.mark.usefixtures("model_dispatch", "no_compiling")
def test_native_calls_say_so():
    a, c, y = operands((10007, 16), (16, 12), (10007, 12))
    hlo = cuda_hlo(lambda a, c, y: jax_tsmm.ab(a, c, out=y, beta=0.5j), a, c, y)  # complex beta
    assert "@tsmm_ab_update" in hlo and "real_view = false" in hlo and "tensor<16x12xcomplex<f64>>" in hlo
    a, b = operands((10007, 65), (10007, 3))  # 2M > 128
    assert "real_view = false" in cuda_hlo(jax_tsmm.atb, a, b)
    a, b = operands((10007, 2), (10007, 2), dtype=jnp.complex64)  # narrow: FMA kernels
    assert "real_view = false" in cuda_hlo(jax_tsmm.atb, a, b)
    a, b = operands((10007, 5), (10007, 3), dtype=jnp.float64)
    assert "real_view = false" in cuda_hlo(jax_tsmm.atb, a, b)


# --- on a GPU -------------------------------------------------------------------------

SHAPES = [(1, 1), (3, 5), (8, 8), (13, 48), (33, 33), (64, 64)]
KS = [10007, 2**16 + 3]


@pytest.fixture
def real_view_everywhere(model_dispatch, monkeypatch):
    """Complex problems run as their real view at every width (by default only where
    the real problem runs on the tensor cores)."""
    monkeypatch.setattr(_dispatch, "_model_prefers_real_view", lambda problem, real, arch: True)


def _assert_real_view(fn, *args):
    hlo = jax.jit(fn).lower(*args).as_text()
    assert "real_view = true" in hlo and "real_view = false" not in hlo, hlo


def _update_close(got, a, c, y, alpha, beta, conj):
    want = alpha * ab_ref(a, c, conj=conj) + beta * to_wide(y)
    bound = 16 * unit_roundoff(a.dtype) * (abs(alpha) * magnitude("ab", a, c) + abs(beta) * np.abs(to_wide(y)))
    assert np.all(np.abs(to_wide(got) - want) <= bound + 1e-30)


@pytest.fixture(scope="module")
def compiled_kernels():
    """Compile the real kernels the GPU cases need in parallel, before the first runs."""
    specs = [KernelSpec(p, default_config(p))
             for m, n in SHAPES for dtype in ("float32", "float64")
             for p in (Problem("atb", dtype, 2 * m, 2 * n), Problem("ab", dtype, 2 * m, 2 * n),
                       Problem("ab", dtype, 2 * m, 2 * n, update=True))]
    _kernels.precompile(specs, _cuda.arch())


@pytest.mark.gpu
@pytest.mark.usefixtures("real_view_everywhere", "compiled_kernels")
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("m, n", SHAPES)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_products_through_the_real_view(dtype, m, n, k):
    rng = np.random.default_rng()
    a = random_operand(rng, (k, m), dtype)
    b = random_operand(rng, (k, n), dtype)
    c = random_operand(rng, (m, n), dtype)
    y = random_operand(rng, (k, n), dtype)
    for conj in (False, True):
        atb = lambda a, b: jax_tsmm.atb(a, b, conj=conj)
        _assert_real_view(atb, a, b)
        assert_close(jax.jit(atb)(a, b), a, b, op="atb", conj=conj)
        ab = lambda a, c: ab_p.bind(a, c, conj=conj)  # the public ab has no conj; grad binds it
        _assert_real_view(ab, a, c)
        assert_close(jax.jit(ab)(a, c), a, c, op="ab", conj=conj)
        alpha, beta = 0.5 - 2j, -1.5
        update = lambda a, c, y: ab_update_p.bind(a, c, y, conj=conj, alpha=alpha, beta=beta)
        _assert_real_view(update, a, c, y)
        _update_close(jax.jit(update)(a, c, y), a, c, y, alpha, beta, conj)
    update = lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=-1, beta=1)
    _assert_real_view(update, a, c, y)
    _update_close(jax.jit(update)(a, c, y), a, c, y, -1, 1, False)


@pytest.mark.gpu
@pytest.mark.usefixtures("model_dispatch")
@pytest.mark.parametrize("m, n", [(57, 64), (60, 58), (64, 59)])
def test_complex128_atb_57_to_64_through_the_models_gauss(m, n):
    """The model's Gauss kernel of complex128 atb with both widths in 57..64 (sm_90:
    4x2 tiles, bulk copies inline), both conj, odd K: within the error bound."""
    rng = np.random.default_rng()
    a = random_operand(rng, (100_003, m), "complex128")
    b = random_operand(rng, (100_003, n), "complex128")
    for conj in (False, True):
        spec = _dispatch.select("atb", "complex128", m, n, 100_003, 0, conj, _cuda.arch(), _cuda.device_kind())
        assert spec.config.gauss == has_bulk_copies(_cuda.arch()), spec
        atb = lambda a, b: jax_tsmm.atb(a, b, conj=conj)
        assert_close(jax.jit(atb)(a, b), a, b, op="atb", conj=conj)


@pytest.mark.gpu
@pytest.mark.usefixtures("model_dispatch")
@pytest.mark.parametrize("m, n", [(37, 37), (64, 40), (34, 61)])
def test_wide_complex128_atb_through_the_models_real_view(m, n):
    """The model's real view of complex128 atb beyond a real result of 64 x 64
    entries (DMMA, on sm_90 with bulk copies where they fit), both conj, odd K."""
    rng = np.random.default_rng()
    a = random_operand(rng, (100_003, m), "complex128")
    b = random_operand(rng, (100_003, n), "complex128")
    for conj in (False, True):
        atb = lambda a, b: jax_tsmm.atb(a, b, conj=conj)
        _assert_real_view(atb, a, b)
        assert_close(jax.jit(atb)(a, b), a, b, op="atb", conj=conj)


@pytest.mark.gpu
@pytest.mark.usefixtures("model_dispatch")
@pytest.mark.parametrize("dtype, m, n", [("complex64", 44, 44), ("complex64", 57, 40), ("complex64", 64, 61),
                                         ("complex128", 44, 44), ("complex128", 57, 61)])
def test_wide_complex_ab_through_the_models_real_view(dtype, m, n):
    """The model's real views of complex ab and its fused update beyond a real result
    of 64 x 64 entries (complex64: 3xTF32 on mma.sync, complex128: DMMA with bulk
    copies on sm_90), both conj, odd K."""
    rng = np.random.default_rng()
    k = 100_003
    a, c, y = (random_operand(rng, shape, dtype) for shape in ((k, m), (m, n), (k, n)))
    for conj in (False, True):
        ab = lambda a, c: ab_p.bind(a, c, conj=conj)
        _assert_real_view(ab, a, c)
        poison(y.nbytes)
        assert_close(jax.jit(ab)(a, c), a, c, op="ab", conj=conj)
        update = lambda a, c, y: ab_update_p.bind(a, c, y, conj=conj, alpha=-1.0, beta=1.0)
        _assert_real_view(update, a, c, y)
        poison(y.nbytes)
        _update_close(jax.jit(update)(a, c, y), a, c, y, -1, 1, conj)


@pytest.mark.gpu
@pytest.mark.usefixtures("real_view_everywhere")
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_beta_runs_natively(dtype):
    rng = np.random.default_rng()
    k, m, n = 2**16 + 3, 3, 5
    a, c, y = (random_operand(rng, s, dtype) for s in ((k, m), (m, n), (k, n)))
    update = lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=1 + 1j, beta=0.5j)
    assert "real_view = false" in jax.jit(update).lower(a, c, y).as_text()
    _update_close(jax.jit(update)(a, c, y), a, c, y, 1 + 1j, 0.5j, False)


@pytest.mark.gpu
@pytest.mark.usefixtures("real_view_everywhere")
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_batched_real_view(dtype):
    """vmap over a batch axis, and batch axes that broadcast: batch strides count
    real elements in the handler."""
    rng = np.random.default_rng()
    k, m, n = 10007, 13, 6
    a = random_operand(rng, (4, k, m), dtype)
    b = random_operand(rng, (k, n), dtype)
    c = random_operand(rng, (4, m, n), dtype)
    atb = jax.vmap(lambda a: jax_tsmm.atb(a, b, conj=True))
    _assert_real_view(atb, a)
    assert_close(jax.jit(atb)(a), a, b, op="atb", conj=True)
    ab = jax.vmap(jax_tsmm.ab, in_axes=(None, 0))
    _assert_real_view(ab, a[0], c)
    assert_close(jax.jit(ab)(a[0], c), a[0], c, op="ab")
    assert_close(jax.jit(jax_tsmm.ab)(a, c[:1]), a, c[:1], op="ab")
