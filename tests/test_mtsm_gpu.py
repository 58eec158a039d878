"""mtsm's CUDA kernels on a GPU, against the float64/complex128 NumPy reference.

Dispatch follows the model here (``model_kernels``), so each case reaches the
kernel it names; ``test_tuned_kernels`` runs every mtsm kernel the shipped
tuning database chooses, ``test_search_candidates`` those the tuner times.
Skipped where no GPU is present. Every check draws fresh random inputs and
poisons the allocator's free memory with NaN first, so an output element a
kernel fails to write shows up as NaN.
"""

from __future__ import annotations

import functools
import itertools
import math
from contextlib import nullcontext
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_tsmm
from jax_tsmm import _cuda, _dispatch, _kernels, _mtsm, tune
from jax_tsmm.codegen import mtsm as mtsm_codegen
from jax_tsmm.codegen import search
from jax_tsmm.codegen.prebuilt import PREBUILT_WIDTHS
from reference import (DERIVATIVE_RTOL, assert_close, assert_tree_close, magnitude, poison, random_operand, reference,
                       to_wide, unit_roundoff)
from test_mtsm import tuned_specs

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("model_kernels")]  # every case reaches its kernel

DTYPES = ("float32", "float64", "complex64", "complex128")
WIDTHS = (1, 2, 3, 4, 5, 8, 13, 16, 24, 32, 40, 64)
# (M, K): odd sizes, one dimension tiny, and K long enough for split-K with few row blocks.
SIZES = ((1000, 777), (4099, 3), (3, 4099), (1, 1), (257, 1031), (130, 20011), (9001, 65))


def run(a, x, transpose_a=False, conj=False):
    """mtsm under jit, on poisoned memory."""
    poison(int(np.prod(a.shape)) * 16)
    return jax.jit(functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj))(a, x)


def operands(rng, dtype, m, k, n, transpose_a, a_batch=(), x_batch=()):
    a = random_operand(rng, a_batch + ((k, m) if transpose_a else (m, k)), dtype)
    x = random_operand(rng, x_batch + (k, n), dtype)
    return a, x


def check(out, a, x, transpose_a, conj=False):
    assert_close(out, a, x, op="atb" if transpose_a else "ab", conj=conj,
                 err_msg=f"mtsm transpose_a={transpose_a}")


def _cases():
    """Every width for both layouts; dtype, conj and size rotate so that each
    appears with odd and even widths."""
    for index, (transpose_a, n) in enumerate(itertools.product((False, True), WIDTHS)):
        dtype = DTYPES[(index + n) % len(DTYPES)]
        conj = dtype.startswith("complex") and index % 2 == 0
        m, k = SIZES[index % len(SIZES)]
        yield transpose_a, dtype, n, conj, m, k


CASES = list(_cases())


def _spec(transpose_a, dtype, n, conj):
    return _mtsm.select(dtype, transpose_a, n, conj, 8192)


@pytest.fixture(scope="module", autouse=True)
def compiled_kernels(model_kernels):
    """Compile every kernel the cases need in parallel before the first case runs."""
    problems = {(t, d, n, c) for t, d, n, c, _, _ in CASES}
    problems |= {(t, d, 16, d.startswith("complex")) for t in (False, True) for d in DTYPES}
    problems |= {(t, "float32", n, False) for t in (False, True) for n in (3, 7, 16)}
    problems |= {(t, "float64", n, False) for t in (False, True) for n in (3, 5, 8, 24, 64)}
    specs = [_spec(*p) for p in problems]
    _kernels.precompile([s for s in specs if s is not None], _cuda.arch())


def compiled_hlo(fn, *args) -> str:
    return jax.jit(fn).lower(*args).compile().as_text()


@pytest.mark.parametrize("transpose_a, dtype, n, conj, m, k", CASES)
def test_shapes(transpose_a, dtype, n, conj, m, k):
    rng = np.random.default_rng()
    a, x = operands(rng, dtype, m, k, n, transpose_a)
    check(run(a, x, transpose_a, conj), a, x, transpose_a, conj)


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_uses_a_kernel(dtype, transpose_a):
    conj = dtype.startswith("complex")
    assert _spec(transpose_a, dtype, 16, conj) is not None
    rng = np.random.default_rng()
    a, x = operands(rng, dtype, 2001, 1503, 16, transpose_a)
    f = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj)
    assert "tsmm_mtsm" in compiled_hlo(f, a, x)
    check(run(a, x, transpose_a, conj), a, x, transpose_a, conj)


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("m, k", [(8192, 8192), (30000, 700), (600, 200003)])
def test_large(transpose_a, m, k):
    """Full-size problems: many row blocks, and one with a long split K."""
    rng = np.random.default_rng()
    a, x = operands(rng, "float32", m, k, 7, transpose_a)
    check(run(a, x, transpose_a), a, x, transpose_a)


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("a_batch, x_batch", [((3,), (3,)), ((1,), (4,)), ((2, 3), (1, 1)), ((2, 1), (1, 3))])
def test_batches(transpose_a, a_batch, x_batch):
    """Equal batch shapes and whole-operand broadcasts run on the kernels; other
    broadcasts on XLA's dot. Odd M*K puts every other batch item off a 16-byte
    boundary (the element-copy path)."""
    rng = np.random.default_rng()
    a, x = operands(rng, "float32", 301, 233, 16, transpose_a, a_batch, x_batch)
    check(run(a, x, transpose_a), a, x, transpose_a)


@pytest.mark.parametrize("transpose_a", (False, True))
def test_splits_are_bitwise_deterministic(transpose_a):
    rng = np.random.default_rng()
    m, k = 500, 300007
    spec = _spec(transpose_a, "float64", 8, False)
    assert mtsm_codegen.splits(spec, m, k, 1, _cuda.multiprocessors()) > 1
    a, x = operands(rng, "float64", m, k, 8, transpose_a)
    first = np.asarray(run(a, x, transpose_a))
    check(first, a, x, transpose_a)
    for _ in range(3):
        assert np.array_equal(np.asarray(run(a, x, transpose_a)), first)


@pytest.mark.parametrize("transpose_a", (False, True))
def test_nan_propagates(transpose_a):
    rng = np.random.default_rng()
    m, k = 700, 5003
    a, x = operands(rng, "float64", m, k, 3, transpose_a)
    row, col = (1234, 77) if transpose_a else (77, 1234)
    a[row, col] = np.nan
    out = np.asarray(run(a, x, transpose_a))
    assert np.isnan(out[77]).all() and np.isfinite(np.delete(out, 77, axis=0)).all()


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("dtype, conj", [("float64", False), ("complex64", True)])
def test_gradients_through_the_kernels(dtype, conj, transpose_a):
    rng = np.random.default_rng()
    m, k, n = 300, 411, 5
    a, x = operands(rng, dtype, m, k, n, transpose_a, (2,), (2,))

    def loss(f):
        return lambda a, x: jnp.sum(jnp.abs(f(a, x)) ** 2)

    ours = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj)

    def theirs(a, x):
        a = jnp.conj(a) if conj else a
        a = jnp.swapaxes(a, -1, -2) if transpose_a else a
        return jnp.matmul(a, x, precision=lax.Precision.HIGHEST)

    grad = lambda f: jax.jit(jax.grad(loss(f), argnums=(0, 1)))
    assert compiled_hlo(jax.grad(loss(ours), argnums=(0, 1)), a, x).count("tsmm_mtsm") >= 2
    assert_tree_close(grad(ours)(a, x), grad(theirs)(a, x), DERIVATIVE_RTOL[np.dtype(dtype)], "grad")


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("m, k", [(1000, 777), (130, 20011), (4099, 3)])
def test_tensor_core_path(transpose_a, m, k):
    """float64 widths that would bind the FMA units run on DMMA."""
    rng = np.random.default_rng()
    for n in (24, 64):
        assert _spec(transpose_a, "float64", n, False).config.mma
        a, x = operands(rng, "float64", m, k, n, transpose_a)
        check(run(a, x, transpose_a), a, x, transpose_a)


def test_problems_without_a_kernel_use_xla():
    rng = np.random.default_rng()
    a, x = operands(rng, "complex128", 300, 200, 64, False)
    assert _spec(False, "complex128", 64, False) is None
    assert "tsmm_mtsm" not in compiled_hlo(jax_tsmm.mtsm, a, x)
    check(run(a, x), a, x, False)
    a16 = jnp.asarray(a.real, jnp.float16)
    assert "tsmm_mtsm" not in compiled_hlo(jax_tsmm.mtsm, a16, jnp.asarray(x.real, jnp.float16))


def test_without_nvcc_only_the_prebuilt_kernels_run(no_nvcc):
    """No nvcc at run time: the model's float64 kernels at N = 8 are built in and
    run; at N = 5 they are not, and XLA's dot serves with a warning
    (``_kernels.runnable``). Every result right."""
    rng = np.random.default_rng()
    for (n, kernel), transpose_a in itertools.product(((5, False), (8, True)), (False, True)):
        assert (_spec(transpose_a, "float64", n, False).name in _kernels.prebuilt_names()) == kernel
        a, x = operands(rng, "float64", 1000, 777, n, transpose_a)
        call = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a)
        with nullcontext() if kernel else pytest.warns(RuntimeWarning, match="until then XLA's dot serves"):
            assert ("tsmm_mtsm" in compiled_hlo(call, a, x)) == kernel
        check(run(a, x, transpose_a), a, x, transpose_a)


def test_without_nvcc_the_prebuilt_wgmma_kernels_run(no_nvcc, tuned_dispatch):
    """The wgmma kernels (sm_90a) this GPU's shipped database chooses for float32 mtsm
    at the prebuilt widths are built in too: without nvcc those calls run them, right
    (each layout and width at the smallest tuned size that chooses one)."""
    rng = np.random.default_rng()
    ran = 0
    for transpose_a, n in itertools.product((False, True), PREBUILT_WIDTHS):
        for size in (2048, 8192, 16384):
            spec = _mtsm.select("float32", transpose_a, n, False, size, _cuda.arch(), _cuda.device_kind())
            if spec is not None and spec.config.wgmma:
                assert spec.name in _kernels.prebuilt_names(), spec.name
                a, x = operands(rng, "float32", size, size, n, transpose_a)
                call = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a)
                assert "tsmm_mtsm" in compiled_hlo(call, a, x)
                check(run(a, x, transpose_a), a, x, transpose_a)
                ran += 1
                break
    if not ran:
        pytest.skip(f"no wgmma kernel chosen for float32 mtsm at the prebuilt widths on {_cuda.device_kind()}")


def test_many_batch_items_in_one_launch():
    rng = np.random.default_rng()
    a, x = operands(rng, "complex64", 40, 33, 3, True, (300,), (300,))
    assert math.prod(a.shape[:-2]) <= _mtsm.MAX_BATCH
    check(run(a, x, True, True), a, x, True, True)


def _run_forced(spec: mtsm_codegen.MtsmSpec, rng) -> None:
    """``spec`` on two random problems of ragged sizes: a few row blocks with K split
    (the finalize), M and K off 16-byte rows (the element copies); and many row blocks
    with a K of a few chunks, M and K whole 16-byte vectors (whole chunks of whole
    blocks take the hoisted copies, the last block and chunk the general ones)."""
    p = spec.problem
    vec = p.vector_elements
    for m, k in ((2 * spec.block_rows + 5, 60 * spec.chunk + 3),
                 (40 * spec.block_rows + vec, 3 * spec.chunk + vec)):
        a, x = operands(rng, p.dtype, m, k, p.n, p.transpose_a)
        with _dispatch.forced(spec):
            out = run(a, x, p.transpose_a, p.conj)
        check(out, a, x, p.transpose_a, p.conj)


def _run_all_forced(specs: list[mtsm_codegen.MtsmSpec]) -> None:
    """Every spec through ``_run_forced``, compiled together first (in parallel)."""
    _kernels.precompile(specs, _cuda.arch())
    rng = np.random.default_rng()
    for spec in specs:
        _run_forced(spec, rng)


SEARCHED = [(False, "float64", 3), (True, "float64", 3), (False, "float64", 40), (True, "float64", 40),
            (False, "float32", 16), (True, "float32", 7), (False, "float32", 64), (True, "float64", 64),
            (True, "float32", 32)]


def searched_specs(transpose_a, dtype, n) -> list[mtsm_codegen.MtsmSpec]:
    """The tuner's first kernels for a problem: the candidates, and the neighbours of
    the model's default."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, dtype, n)
    configs = search.mtsm_candidates(problem, 12)
    configs += [c for c in search.mtsm_neighbours(problem, configs[0]) if c not in configs]
    return [mtsm_codegen.MtsmSpec(problem, c) for c in configs]


def tf32x3_specs(transpose_a, n) -> list[mtsm_codegen.MtsmSpec]:
    """The search's two best 3xTF32 kernels on mma.sync for a float32 problem."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, "float32", n)
    configs = [c for c in search.mtsm_candidates(problem, 64) if c.tf32x3 and not c.wgmma][:2]
    return [mtsm_codegen.MtsmSpec(problem, c) for c in configs]


def wgmma_specs(transpose_a, n) -> list[mtsm_codegen.MtsmSpec]:
    """The search's best 3xTF32 kernel on wgmma of each shape of warpgroups and chunk
    for a float32 problem."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, "float32", n)
    shapes = {}
    for c in search.mtsm_candidates(problem, 64):
        if c.wgmma:
            shapes.setdefault((c.rows_per_thread, c.row_warps, c.k_steps), c)
    return [mtsm_codegen.MtsmSpec(problem, c) for c in shapes.values()]


@pytest.mark.parametrize("transpose_a, dtype, n", SEARCHED)
def test_search_candidates(transpose_a, dtype, n):
    """Every configuration the tuner would time first for these problems, so a fast
    wrong kernel cannot win a tuning run."""
    _run_all_forced(searched_specs(transpose_a, dtype, n))


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("n", (8, 13, 40, 64))
def test_tf32x3_kernels(transpose_a, n):
    """float32 on the TF32 tensor cores (3xTF32, mma.sync): the search's best such
    kernels, on ragged sizes with and without split K, within float32's error bound."""
    specs = tf32x3_specs(transpose_a, n)
    assert specs
    _run_all_forced(specs)


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("n", (8, 13, 32, 40, 64))
def test_wgmma_kernels(transpose_a, n):
    """3xTF32 on wgmma: the search's best kernels of each shape of warpgroups and
    chunk, on ragged sizes with and without split K, within float32's error bound."""
    specs = wgmma_specs(transpose_a, n)
    assert specs
    _run_all_forced(specs)


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("wgmma", (False, True))
def test_tf32x3_keeps_float32_accuracy_on_positive_data(transpose_a, wgmma):
    """All-positive operands (no cancellation, so a biased rounding shows): the search's
    best 3xTF32 kernel (on mma.sync, or on wgmma) has its largest error relative to
    |A| |X| within 4x that of XLA's float32 dot at HIGHEST precision on the same operands."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, "float32", 40)
    spec = mtsm_codegen.MtsmSpec(problem, next(c for c in search.mtsm_candidates(problem, 64)
                                               if c.tf32x3 and c.wgmma == wgmma))
    rng = np.random.default_rng()
    m, k = 3 * spec.block_rows + 7, 200 * spec.chunk + 5
    a, x = operands(rng, "float32", m, k, problem.n, transpose_a)
    a, x = np.abs(a), np.abs(x)
    with _dispatch.forced(spec):
        ours = to_wide(run(a, x, transpose_a))
    xla = to_wide(jnp.matmul(a.T if transpose_a else a, x, precision=lax.Precision.HIGHEST))
    op = "atb" if transpose_a else "ab"
    want, scale = reference(op, a, x), magnitude(op, a, x)
    ours_error, xla_error = np.max(np.abs(ours - want) / scale), np.max(np.abs(xla - want) / scale)
    assert ours_error <= 4 * max(xla_error, unit_roundoff("float32")), (spec.name, ours_error, xla_error)


def test_tuned_kernels():
    """Every mtsm kernel the shipped tuning databases of this architecture choose."""
    _run_all_forced(tuned_specs(_cuda.arch()))


def fitted_specs(arch: str, device_kind: str) -> list[mtsm_codegen.MtsmSpec]:
    """Every kernel dispatch fits to an untuned N from its tuned neighbours, with the
    shipped databases of GPU model ``device_kind`` of ``arch``, at each size the tuner
    times."""
    with mock.patch.object(_dispatch, "_model_only", []):  # the shipped databases, out of model_kernels
        tuned_widths = {mtsm_codegen.mtsm_key_problem(key).n for key in _dispatch.database(arch, device_kind)
                        if key.startswith("mtsm")}
        specs = [_mtsm.select(dtype, transpose_a, n, False, size, arch, device_kind)
                 for transpose_a in (False, True) for dtype in DTYPES
                 for n in range(1, mtsm_codegen.MAX_N + 1) if n not in tuned_widths
                 for _, size in tune.MTSM_K_RANGES]
    return list(dict.fromkeys(spec for spec in specs if spec is not None))


def test_fitted_kernels_of_untuned_widths():
    """Every kernel dispatch fits to an untuned N on this GPU."""
    specs = fitted_specs(_cuda.arch(), _cuda.device_kind())
    assert specs, "no untuned width takes a kernel"
    _run_all_forced(specs)


# The families of tests whose kernels scripts/precompile_tests.py compiles ahead, on
# any machine (for sm_90): per test, the parameters that pick a case's kernels, and
# those kernels. The fitted kernels depend on the GPU model: those of every model
# with a database of sm_90.
KERNEL_FAMILIES = {
    "test_search_candidates": (("transpose_a", "dtype", "n"), searched_specs),
    "test_tf32x3_kernels": (("transpose_a", "n"), tf32x3_specs),
    "test_wgmma_kernels": (("transpose_a", "n"), wgmma_specs),
    "test_tuned_kernels": ((), lambda: tuned_specs("sm_90")),
    "test_fitted_kernels_of_untuned_widths": ((), lambda: [spec for model in _dispatch.other_models("sm_90")
                                                           for spec in fitted_specs("sm_90", model)]),
}
