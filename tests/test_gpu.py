"""The CUDA path on a GPU: generated kernels against the float64/complex128 reference.

Dispatch follows the model here (``model_kernels``), so each case reaches the
kernel it names; ``test_tuned_kernels`` runs every kernel the shipped tuning
database chooses.

Run with ``python -m pytest -m gpu``; skipped where no GPU is present. Every
check draws fresh random inputs and poisons the allocator's free memory with
NaN first, so an output element the kernel fails to write shows up as NaN.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import sys
from contextlib import nullcontext

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsmm
import jax_tsmm.linalg
from jax_tsmm import _cuda, _dispatch, _kernels
from jax_tsmm.codegen import Config, KernelSpec, Problem, default_config
from jax_tsmm.codegen.model import wgmma_config
from jax_tsmm.codegen.prebuilt import PREBUILT_WIDTHS
from jax_tsmm.codegen.search import candidates, flat_candidates
from jax_tsmm.codegen.spec import MAX_SHARED_BYTES, has_wgmma, key_problem
from jax import lax
from kernel_families import selected_kernels
from reference import ab_ref, assert_close, magnitude, poison, random_operand, reference, to_wide, unit_roundoff

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("model_kernels")]

DTYPES = ("float32", "float64", "complex64", "complex128")
SMALL_K = (1, 31, 32, 33, 1000, 4099)


def run(op, a, b, conj=False):
    """atb(a, b, conj) or ab(a, b) under jit, on poisoned memory."""
    out_elems = (a.shape[-1] * b.shape[-1]) if op == "atb" else a.shape[-2] * b.shape[-1]
    poison(out_elems * 16 * max(1, int(np.prod(a.shape[:-2], dtype=np.int64))))
    if op == "atb":
        return jax.jit(lambda x, y: jax_tsmm.atb(x, y, conj=conj))(a, b)
    return jax.jit(jax_tsmm.ab)(a, b)


def check_forced(spec: KernelSpec, op, a, b, conj=False) -> None:
    """``spec`` forced on ``op(a, b)``: within the error bound, and the same bits on a second run."""
    with _dispatch.forced(spec):
        out = run(op, a, b, conj)
        again = run(op, a, b, conj)
    assert_close(out, a, b, op=op, conj=conj, err_msg=spec.name)
    assert np.array_equal(np.asarray(out), np.asarray(again))


def check_forced_update(p: Problem, spec: KernelSpec, rng, k, batch=(), alpha=-1, beta=1) -> None:
    """``spec`` forced on ab's fused update ``p`` (spec's problem, or its real view's),
    beta * y + alpha * A C with out written over y (donated), on fresh operands:
    within the error bound."""
    a = random_operand(rng, batch + (k, p.m), p.dtype)
    c = random_operand(rng, (p.m, p.n), p.dtype)
    y = random_operand(rng, batch + (k, p.n), p.dtype)
    y_wide = to_wide(y)
    want = alpha * ab_ref(a, c) + beta * y_wide
    with _dispatch.forced(spec):
        got = jax.jit(lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=alpha, beta=beta), donate_argnums=2)(a, c, y)
    bound = 16 * unit_roundoff(p.dtype) * (abs(alpha) * magnitude("ab", a, c) + abs(beta) * np.abs(y_wide))
    assert np.all(np.abs(to_wide(got) - want) <= bound + 1e-30), spec.name


def operands(rng, op, dtype, k, m, n, a_batch=(), b_batch=()):
    a = random_operand(rng, a_batch + (k, m), dtype)
    b = random_operand(rng, b_batch + ((k, n) if op == "atb" else (m, n)), dtype)
    return a, b


def _small_cases():
    """Every M, N in 1..16 for both ops; dtype, conj and K rotate so that each
    appears often, and every dtype meets odd and even shapes."""
    for index, (op, m, n) in enumerate(itertools.product(("atb", "ab"), range(1, 17), range(1, 17))):
        dtype = DTYPES[(index + m) % 4]
        conj = op == "atb" and dtype.startswith("complex") and (index // 4) % 2 == 0
        yield op, dtype, m, n, conj, SMALL_K[index % len(SMALL_K)]


SMALL_CASES = list(_small_cases())
WIDE_CASES = [  # 17..128, primes included
    (op, dtype, m, n, op == "atb" and dtype.startswith("complex"), k)
    for (m, n), dtype, k in zip(
        [(17, 17), (23, 31), (32, 32), (37, 5), (41, 64), (48, 13), (53, 53), (64, 64), (61, 67),
         (5, 97), (100, 3), (127, 127), (128, 128), (128, 1), (1, 128), (96, 80)],
        itertools.cycle(DTYPES),
        itertools.cycle((33, 1000, 4099, 20011)),
    )
    for op in ("atb", "ab")
]


def model_kernel(op, dtype, m, n, conj, k) -> list[KernelSpec]:
    """The kernel a ``test_shapes`` case runs: the model's choice (the module's
    ``model_kernels``), none where that is XLA's dot."""
    with _dispatch.model_only():
        spec = _dispatch.select(op, dtype, m, n, k, 0, conj, _cuda.arch(), _cuda.device_kind())
    return [spec] if spec is not None else []


@pytest.fixture(scope="module")
def shape_kernels_compiled(request):
    """The selected cases' kernels, not every case's: compiling all of them took the
    first case in each of a call's processes 190-205 s (an H200, 2026-12-01)."""
    precompile_selected(request, "test_shapes")


@pytest.mark.parametrize("op, dtype, m, n, conj, k", SMALL_CASES + WIDE_CASES)
def test_shapes(op, dtype, m, n, conj, k, shape_kernels_compiled):
    rng = np.random.default_rng()
    a, b = operands(rng, op, dtype, k, m, n)
    out = run(op, a, b, conj)
    assert_close(out, a, b, op=op, conj=conj)


@pytest.mark.parametrize("k", [0, 1, 31, 32, 33, 1000, 10**6 + 7])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["atb", "ab"])
def test_long_dimensions(op, dtype, k):
    rng = np.random.default_rng()
    m, n = (7, 5) if dtype.startswith("complex") else (16, 16)
    a, b = operands(rng, op, dtype, k, m, n)
    conj = op == "atb" and dtype.startswith("complex")
    assert_close(run(op, a, b, conj), a, b, op=op, conj=conj)


@pytest.mark.parametrize("a_batch, b_batch", [((3,), (3,)), ((4,), (1,)), ((1,), (5,)), ((2, 3), (1, 3)), ((2, 1, 3), (1, 4, 1))])
@pytest.mark.parametrize("op", ["atb", "ab"])
def test_batches_with_broadcasting(op, a_batch, b_batch):
    rng = np.random.default_rng()
    a, b = operands(rng, op, "float64", 1001, 6, 3, a_batch, b_batch)
    assert_close(run(op, a, b), a, b, op=op)


def test_many_batch_items_small_k():
    rng = np.random.default_rng()
    a, b = operands(rng, "atb", "complex64", 40, 9, 4, (300,), (300,))
    assert_close(run("atb", a, b, True), a, b, op="atb", conj=True)


def test_misaligned_batch_items():
    """Odd K*M makes every other batch item start off a 16-byte boundary."""
    rng = np.random.default_rng()
    for op in ("atb", "ab"):
        a, b = operands(rng, op, "float32", 1001, 3, 5, (5,), (5,))
        assert_close(run(op, a, b), a, b, op=op)


def test_jit_vmap_grad_end_to_end():
    rng = np.random.default_rng()
    a = random_operand(rng, (4, 5000, 6), "complex128")
    b = random_operand(rng, (5000, 3), "complex128")

    def loss(fn):
        return lambda a, b: jnp.sum(jnp.abs(jax.vmap(fn, in_axes=(0, None))(a, b)) ** 2)

    ours = jax.jit(jax.grad(loss(lambda x, y: jax_tsmm.atb(x, y, conj=True)), argnums=(0, 1)))(a, b)
    theirs = jax.grad(loss(lambda x, y: jnp.matmul(x.conj().T, y, precision="highest")), argnums=(0, 1))(a, b)
    for x, y in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-10, atol=1e-8)
    hlo = jax.jit(jax.grad(loss(lambda x, y: jax_tsmm.atb(x, y, conj=True)))).lower(a, b).as_text()
    assert "tsmm_atb" in hlo and "tsmm_ab" in hlo


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_gram_matrix_derivatives_on_the_kernels(dtype):
    """jit(grad) and jvp through atb(v, v) (``gram_p``), batched along K's neighbour
    axis: the Gram kernel forward and one product backward (ab's kernel, or XLA's dot
    where dispatch takes it); right against jnp.matmul's, the tangent exactly
    Hermitian."""
    rng = np.random.default_rng()
    conj = dtype == "complex128"
    v = random_operand(rng, (100_003, 3, 12), dtype)
    dv = random_operand(rng, (100_003, 3, 12), dtype)

    def loss(gram):
        return lambda x: jnp.sum(jnp.abs(jax.vmap(gram, in_axes=1)(x)) ** 2)
    ours = loss(lambda x: jax_tsmm.atb(x, x, conj=conj))
    theirs = loss(lambda x: jnp.matmul(x.conj().T if conj else x.T, x, precision="highest"))
    hlo = jax.jit(jax.grad(ours)).lower(v).as_text()
    kernels = re.findall(r'kernel = "(tsmm_\w+)"', hlo)
    assert "_gram_" in kernels[0] and all(k.startswith("tsmm_ab") for k in kernels[1:]), kernels
    assert len(kernels[1:]) + hlo.count("stablehlo.dot_general") == 1, kernels
    got, want = jax.jit(jax.grad(ours))(v), jax.grad(theirs)(v)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-8 * np.abs(want).max())
    _, tangent = jax.jit(lambda x, t: jax.jvp(lambda y: jax_tsmm.atb(y, y, conj=conj), (x,), (t,)))(v[:, 0], dv[:, 0])
    tangent = np.asarray(tangent)
    assert np.array_equal(tangent, tangent.conj().T if conj else tangent.T)
    reference = v[:, 0].conj().T @ dv[:, 0] if conj else v[:, 0].T @ dv[:, 0]
    reference = reference + (reference.conj().T if conj else reference.T)
    np.testing.assert_allclose(tangent, reference, rtol=1e-10, atol=1e-10 * np.abs(reference).max())


def test_kernels_are_used():
    a = jnp.ones((1000, 5))
    hlo = jax.jit(lambda x: jax_tsmm.atb(x, x)).lower(a).compile().as_text()
    assert "tsmm_atb" in hlo


def test_without_nvcc_calls_outside_the_prebuilt_set_run_xla(no_nvcc):
    """No nvcc at run time: a call whose kernel is not prebuilt runs XLA's dot and
    warns (``_kernels.runnable``); a prebuilt kernel still runs. Both results right."""
    rng = np.random.default_rng()
    for m, n, kernel in ((27, 23, False), (8, 8, True)):
        assert (_dispatch.select("atb", "float64", m, n, 100_003, 0, False).name in _kernels.prebuilt_names()) == kernel
        a, b = operands(rng, "atb", "float64", 100_003, m, n)
        call = jax.jit(lambda x, y: jax_tsmm.atb(x, y))
        with pytest.warns(RuntimeWarning, match="until then XLA's dot serves") if not kernel else nullcontext():
            hlo = call.lower(a, b).compile().as_text()
        assert ("tsmm_atb" in hlo) == kernel
        poison(m * n * 8)
        assert_close(call(a, b), a, b, op="atb")


def test_without_nvcc_the_prebuilt_wgmma_kernels_run(no_nvcc, tuned_dispatch):
    """The wgmma kernels (sm_90a) this GPU's shipped database chooses for float32 A C
    at the prebuilt widths are built in too: without nvcc those calls run them, right."""
    rng = np.random.default_rng()
    k = (1 << 20) + 3
    chosen = {width: spec for width in PREBUILT_WIDTHS
              if (spec := _dispatch.select("ab", "float32", width, width, k, 0, False, _cuda.arch(),
                                           _cuda.device_kind())) is not None and spec.config.wgmma}
    if not chosen:
        pytest.skip(f"no wgmma kernel chosen for float32 A C at the prebuilt widths on {_cuda.device_kind()}")
    for width, spec in chosen.items():
        assert spec.name in _kernels.prebuilt_names(), spec.name
        a, c = operands(rng, "ab", "float32", k, width, width)
        call = jax.jit(jax_tsmm.ab)
        assert "tsmm_ab" in call.lower(a, c).compile().as_text()
        poison(k * width * 4)
        assert_close(call(a, c), a, c, op="ab")


@pytest.mark.parametrize("op", ["atb", "ab"])
def test_bitwise_deterministic(op):
    rng = np.random.default_rng()
    a, b = operands(rng, op, "float64", 3 * 10**6 + 1, 11, 7)
    first = np.asarray(run(op, a, b))
    for _ in range(3):
        assert np.array_equal(np.asarray(run(op, a, b)), first)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_propagate(bad):
    rng = np.random.default_rng()
    a, b = operands(rng, "atb", "float64", 100_003, 4, 3)
    a[77_777, 2] = bad
    out = np.asarray(run("atb", a, b))
    assert not np.isfinite(out[2]).any() and np.isfinite(np.delete(out, 2, axis=0)).all()
    a, c = operands(rng, "ab", "float64", 100_003, 4, 3)
    a[77_777, 2] = bad
    out = np.asarray(run("ab", a, c))
    assert not np.isfinite(out[77_777]).any() and np.isfinite(np.delete(out, 77_777, axis=0)).all()


def test_64_bit_indexing():
    """K*M above 2**31 elements: offsets must not wrap."""
    k, m, n = 2**27 + 3, 17, 2
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (k, m), jnp.float32)
    b = jax.random.normal(key_b, (k, n), jnp.float32)
    assert k * m > 2**31
    got = np.asarray(jax_tsmm.atb(a, b), np.float64)
    want = np.zeros((m, n))
    for start in range(0, k, 1 << 24):  # float64 reference, in slices
        rows = slice(start, start + (1 << 24))
        want += np.asarray(jnp.matmul(a[rows].astype(jnp.float64).T, b[rows].astype(jnp.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.sqrt(k))
    c = jax.random.normal(key_b, (m, n), jnp.float32)
    out = jax_tsmm.ab(a, c)
    tail = slice(k - 1000, k)  # rows whose offsets exceed 2**31 elements
    want_tail = np.asarray(a[tail], np.float64) @ np.asarray(c, np.float64)
    np.testing.assert_allclose(np.asarray(out[tail]), want_tail, rtol=1e-5, atol=1e-5)


def test_result_split_into_panels():
    """Where one block's registers cannot hold M x N, blocks split M into panels."""
    rng = np.random.default_rng()
    a, b = operands(rng, "atb", "complex128", 5003, 100, 90)
    assert _dispatch.select("atb", "complex128", 100, 90, 5003, 0, True, _cuda.arch()).config.m_panels > 1
    assert_close(run("atb", a, b, True), a, b, op="atb", conj=True)
    problem = Problem("atb", "float64", 9, 6)
    forced = KernelSpec(problem, Config(tile_m=2, tile_n=3, row_groups=16, rows_per_stage=32, padded=True, m_panels=2))
    a, b = operands(rng, "atb", "float64", 30011, 9, 6, (2,), (1,))
    with _dispatch.forced(forced):
        out = run("atb", a, b)
    assert_close(out, a, b, op="atb")


@pytest.mark.parametrize("op, dtype, m, n", [("atb", "float64", 10, 10), ("atb", "float64", 12, 12),
                                          ("atb", "complex128", 24, 24), ("ab", "float32", 13, 13),
                                          ("ab", "float64", 33, 33), ("atb", "float32", 7, 5)])
def test_element_stage_copies(op, dtype, m, n):
    """Config.stage_copy = "element": rows staged one element at a time, in padded
    and unpadded layouts, over batch items that start off a 16-byte boundary where
    K * M is odd, with a ragged last chunk."""
    rng = np.random.default_rng()
    problem = Problem(op, dtype, m, n)
    spec = KernelSpec(problem, dataclasses.replace(default_config(problem), stage_copy="element"))
    a, b = operands(rng, op, dtype, 3 * spec.rows_per_chunk + 5, m, n, (3,), (3,) if op == "atb" else (1,))
    with _dispatch.forced(spec):
        out = run(op, a, b)
    assert_close(out, a, b, op=op)


@pytest.mark.parametrize("dtype, m, n, kind", [
    *[(dtype, m, n, "stage_out") for dtype, m, n in (
        ("float64", 11, 54), ("float64", 1, 41), ("float64", 8, 36), ("complex64", 1, 41), ("complex64", 7, 51),
        ("float32", 1, 21), ("float32", 5, 63), ("float32", 4, 27))],
    *[(dtype, m, n, "mma") for dtype, m, n in (
        ("float32", 48, 1), ("float32", 64, 2), ("float32", 16, 5), ("float32", 27, 6), ("float32", 20, 9),
        ("float64", 64, 1), ("float64", 34, 1), ("float64", 16, 3), ("float64", 24, 3), ("float64", 48, 2))],
])
def test_model_ab_kernels_of_lopsided_widths(dtype, m, n, kind):
    """The model's ab kernels where out is many times wider than A, out staged in
    shared memory (model._ab_staged_row_bytes), and where A's rows are wide and out
    narrow, on the tensor cores (model.AB_MMA_MIN_M, WGMMA_M: DMMA with bulk copies,
    wgmma in two or three warpgroups a block): batch items that start off a 16-byte
    boundary, a ragged last chunk, and the same bits on a second run."""
    rng = np.random.default_rng()
    problem = Problem("ab", dtype, m, n)
    spec = KernelSpec(problem, default_config(problem, _cuda.arch()))
    assert getattr(spec.config, kind)
    a, c = operands(rng, "ab", dtype, 3 * spec.rows_per_chunk + 5, m, n, (3,), (1,))
    check_forced(spec, "ab", a, c)


@pytest.mark.parametrize("dtype, m, n", [("complex64", 40, 1), ("complex64", 24, 1), ("complex128", 48, 1),
                                         ("complex128", 35, 3)])
def test_narrow_complex_ab_runs_as_its_real_view_on_tensor_cores(dtype, m, n):
    """Complex ab with wide rows of A and narrow out, whose complex FMA kernels hold
    few threads, runs as its real view on the tensor cores (the model's rule), over
    batch items and a ragged last chunk."""
    rng = np.random.default_rng()
    k = 100_003
    spec = _dispatch.select("ab", dtype, m, n, k, 1, False, _cuda.arch(), _cuda.device_kind())
    assert _dispatch.is_real_view(spec, dtype) and spec.config.mma
    a, c = operands(rng, "ab", dtype, k, m, n, (3,), (1,))
    assert_close(run("ab", a, c), a, c, op="ab")


@pytest.mark.parametrize("m, n", [(57, 57), (64, 64), (56, 56), (33, 33), (36, 36), (42, 42), (3, 7), (64, 8),
                                  (3, 8), (13, 48)])
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("stage_copy", ["bulk", "bulk_inline"])
def test_bulk_stage_copies(stage_copy, dtype, m, n, k):
    """Config.stage_copy = "bulk" and "bulk_inline": a producer warp, or the first
    consumer warp, stages each chunk with bulk copies
    (one span of unpadded rows taken 8, 4, 2 or 1 apart, or groups of 8 rows with
    padding between them, one copy per group) on transaction barriers, through many
    rounds of the ring, over batch items that start off a 16-byte boundary where
    K * M is not a multiple of a vector, with a ragged last chunk; and the same bits
    on every run."""
    rng = np.random.default_rng()
    problem = Problem("atb", dtype, m, n)
    probe = KernelSpec(problem, Config(mma=True, stage_copy=stage_copy, row_groups=2, rows_per_stage=64))
    config = Config(tile_m=min(2, -(-m // 8)), tile_n=min(4, -(-n // 8)), mapping="blocked", row_groups=2,
                    rows_per_stage=2 * probe.rows_per_pass, stages=3, unroll=2, mma=True, stage_copy=stage_copy,
                    blocks_per_sm=1)
    spec = KernelSpec(problem, config)
    if spec.shared_bytes > MAX_SHARED_BYTES:  # wide rows in groups of 8: a pass of 64 rows per stage
        spec = KernelSpec(problem, dataclasses.replace(config, rows_per_stage=probe.rows_per_pass))
    a, b = operands(rng, "atb", dtype, k, m, n, (3,), (3,))
    check_forced(spec, "atb", a, b)


@pytest.mark.parametrize("m, n, tile_m, row_groups", [
    *[(m, n, 4, 2) for m, n in [(33, 33), (17, 40), (34, 50), (36, 36), (63, 63), (20, 7), (58, 64), (40, 40),
                                (64, 8), (8, 24)]],
    (40, 40, 2, 1), (64, 8, 2, 1), (33, 33, 2, 1), (58, 64, 1, 1),  # spacings capped by the slabs of a pass
])
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_bulk_stage_copies_ab(m, n, tile_m, row_groups, k):
    """ab with Config.stage_copy = "bulk": A staged by a producer warp with bulk copies
    (unpadded rows read 4, 2 or 1 apart, or 8 apart from groups with padding between
    them; with passes of 2 or 1 slabs, at most 2 or 1 apart, padded between groups
    where that needs it), out leaving each chunk as one bulk store from two buffers
    in turn, through many rounds of the ring, over batch items of out and A that
    start off a 16-byte boundary, with a ragged last chunk."""
    rng = np.random.default_rng()
    problem = Problem("ab", "float64", m, n)
    config = Config(tile_m=tile_m, tile_n=min(2, -(-n // 8)), mapping="blocked", row_groups=row_groups,
                    rows_per_stage=64, c_source="global", mma=True, stage_out=True, stage_copy="bulk", blocks_per_sm=1)
    spec = KernelSpec(problem, config)
    a, c = operands(rng, "ab", "float64", k, m, n, (3,), (1,))
    with _dispatch.forced(spec):
        out = run("ab", a, c)
    assert_close(out, a, c, op="ab", err_msg=spec.name)


@pytest.mark.parametrize("m, n", [(1, 8), (3, 7), (13, 48), (1, 1), (5, 3), (16, 16)])
@pytest.mark.parametrize("k", [37, 100_003])
@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_mapping_ab(dtype, m, n, k):
    """ab with Config.mapping = "flat": out as one span of 16-byte vectors in passes
    of whole rows, vectors that straddle rows where N is not a multiple of the
    vector, batch items of out that start off a 16-byte boundary (odd K*N), a
    ragged last chunk, and blocks that walk several chunks (one wave)."""
    rng = np.random.default_rng()
    problem = Problem("ab", dtype, m, n)
    spec = KernelSpec(problem, dataclasses.replace(flat_candidates(problem)[0], waves=1))
    a, c = operands(rng, "ab", dtype, k, m, n, (3,), (1,))
    with _dispatch.forced(spec):
        out = run("ab", a, c)
    assert_close(out, a, c, op="ab", err_msg=spec.name)


@pytest.mark.parametrize("dtype, m, n", [("float64", 3, 7), ("float32", 2, 3), ("complex64", 5, 7),
                                         ("complex128", 4, 4)])
def test_flat_mapping_update_in_place(dtype, m, n):
    """The flat mapping's fused update, y read as vectors (aligned items) or element
    by element (items off a 16-byte boundary), out written over y."""
    problem = Problem("ab", dtype, m, n, update=True)
    spec = KernelSpec(problem, flat_candidates(problem)[0])
    check_forced_update(problem, spec, np.random.default_rng(), 10_001, (3,), alpha=1.5, beta=-0.5)


@pytest.mark.parametrize("k", [1, 31, 33, 1000, 10**6 + 7])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tensor_core_path(dtype, k):
    """Wide atb runs on the FP64 tensor cores (DMMA; float32 widened to double)."""
    rng = np.random.default_rng()
    assert _dispatch.select("atb", dtype, 64, 40, k, 0, False, _cuda.arch()).config.mma
    a, b = operands(rng, "atb", dtype, k, 64, 40, (3,), (1,))
    assert_close(run("atb", a, b), a, b, op="atb")
    first = np.asarray(run("atb", a, b))
    assert np.array_equal(np.asarray(run("atb", a, b)), first)


@pytest.mark.parametrize("m, n", [(64, 64), (37, 29), (17, 100), (128, 128)])
@pytest.mark.parametrize("k", [1, 33, 1000, 10**6 + 7])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tensor_core_path_ab(dtype, m, n, k):
    """ab wider than 16x16 runs on the FP64 tensor cores (DMMA), C in registers."""
    rng = np.random.default_rng()
    assert _dispatch.select("ab", dtype, m, n, k, 1, False, _cuda.arch()).config.mma
    a, c = operands(rng, "ab", dtype, k, m, n, (2,), (1,))
    assert_close(run("ab", a, c), a, c, op="ab")


TF32X3_CASES = [  # op, M, N, tile_m, tile_n, row_groups, stage_copy: odd tiles leave a lone 8-row block of M
    # (atb computes it transposed, against pairs of N's blocks and a lone one at odd tile_n)
    ("atb", 64, 64, 2, 4, 2, "vector"),
    ("atb", 33, 33, 3, 3, 2, "vector"),
    ("atb", 40, 30, 5, 4, 2, "bulk"),
    ("atb", 57, 57, 4, 4, 2, "bulk"),
    ("atb", 57, 57, 4, 4, 2, "bulk_inline"),
    ("atb", 5, 42, 1, 3, 2, "bulk"),
    ("atb", 64, 8, 4, 1, 1, "bulk"),
    ("atb", 42, 42, 2, 3, 2, "bulk"),
    ("ab", 64, 64, 4, 2, 2, "vector"),
    ("ab", 49, 49, 3, 2, 2, "vector"),
    ("ab", 7, 20, 1, 3, 4, "vector"),
    ("ab", 36, 17, 2, 3, 1, "vector"),
]


@pytest.mark.parametrize("op, m, n, tile_m, tile_n, row_groups, stage_copy", TF32X3_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_tf32x3_path(op, m, n, tile_m, tile_n, row_groups, stage_copy, k):
    """float32 on the TF32 tensor cores (Config.tf32x3: each float split into two TF32
    parts, three m16n8k8 products): within float32's error bound, through many
    rounds of the ring with a ragged last chunk, over batch items off a 16-byte
    boundary, and the same bits on every run."""
    rng = np.random.default_rng()
    problem = Problem(op, "float32", m, n)
    per_pass = KernelSpec(problem, Config(tile_m=tile_m, row_groups=row_groups, mma=True, tf32x3=True,
                                          stage_copy=stage_copy)).rows_per_pass
    config = Config(tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups,
                    rows_per_stage=2 * per_pass, stages=3, unroll=2 if op == "atb" else 1, mma=True, tf32x3=True,
                    c_source="shared" if op == "atb" else "global", stage_copy=stage_copy, blocks_per_sm=1)
    spec = KernelSpec(problem, config)
    if spec.shared_bytes > MAX_SHARED_BYTES:  # wide rows 8 apart: one pass of 128 rows per stage
        spec = KernelSpec(problem, dataclasses.replace(config, rows_per_stage=per_pass))
    a, b = operands(rng, op, "float32", k, m, n, (3,), (3,) if op == "atb" else (1,))
    check_forced(spec, op, a, b)


EDGE_CASES = [  # dtype, M, N, tile_m, tile_n, row_groups, stage_copy, tf32x3: both edges, rows 4 and 2 apart
    # (50, float64), 8 apart (float32 odd widths), an M edge alone, an N edge alone, a lone block of M beside
    # edges, edges of 7, float32 on DMMA
    ("float64", 50, 50, 2, 6, 4, "bulk", False),
    ("float64", 50, 50, 2, 6, 4, "bulk_inline", False),
    ("float64", 53, 45, 2, 5, 2, "vector", False),
    ("float64", 9, 64, 1, 4, 2, "bulk", False),
    ("float32", 50, 50, 2, 6, 2, "bulk", True),
    ("float32", 33, 47, 2, 5, 2, "bulk", True),
    ("float32", 40, 15, 2, 1, 3, "bulk", True),
    ("float32", 45, 38, 5, 2, 2, "bulk", True),
    ("float32", 23, 16, 1, 2, 2, "vector", True),
    ("float32", 61, 13, 3, 1, 2, "bulk", False),
]


EDGE_PARAMETERS = ("dtype", "m", "n", "tile_m", "tile_n", "row_groups", "stage_copy", "tf32x3")


def two_passes_a_stage(problem: Problem, config: Config) -> KernelSpec:
    """``config`` with two passes of the block's rows a stage in a ring of 3, or one in a
    ring of 2 where that would not fit (rows 8 apart)."""
    per_pass = KernelSpec(problem, config).rows_per_pass
    spec = KernelSpec(problem, dataclasses.replace(config, rows_per_stage=2 * per_pass, stages=3, unroll=2))
    if spec.shared_bytes > MAX_SHARED_BYTES:
        spec = KernelSpec(problem, dataclasses.replace(spec.config, rows_per_stage=per_pass, stages=2))
    return spec


def edge_spec(dtype, m, n, tile_m, tile_n, row_groups, stage_copy, tf32x3) -> KernelSpec:
    """The kernel of an EDGE_CASES row."""
    return two_passes_a_stage(Problem("atb", dtype, m, n), Config(
        tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups, mma=True, tf32x3=tf32x3,
        stage_copy=stage_copy, fma_edges=True, blocks_per_sm=1))


def precompile_selected(request, test_name: str) -> None:
    """Compile the kernels of the selected cases of ``test_name`` in parallel, before
    the first of them runs (scripts/precompile_tests.py compiles them ahead, anywhere)."""
    _kernels.precompile(selected_kernels(request.session.items, sys.modules[__name__], test_name), _cuda.arch())


@pytest.fixture(scope="module")
def edge_kernels_compiled(request):
    precompile_selected(request, "test_fma_edges_path")


@pytest.mark.parametrize(", ".join(EDGE_PARAMETERS), EDGE_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_fma_edges_path(dtype, m, n, tile_m, tile_n, row_groups, stage_copy, tf32x3, k, edge_kernels_compiled):
    """atb with the tensor cores on the core of whole 8x8 blocks and the FMA units on
    the edges (Config.fma_edges): every entry within the error bound, through many
    rounds of the ring with a ragged last chunk, over batch items off a 16-byte
    boundary, and the same bits on every run."""
    rng = np.random.default_rng()
    spec = edge_spec(dtype, m, n, tile_m, tile_n, row_groups, stage_copy, tf32x3)
    a, b = operands(rng, "atb", dtype, k, m, n, (3,), (3,))
    check_forced(spec, "atb", a, b)


LONE_CASES = [  # dtype, M, N, tile_m, tile_n, row_groups, stage_copy, fma_edges: DMMA atb with the lone block of
    # M transposed (Config.lone_transposed): a zero partner at odd tile_n, rows 2 apart (114: complex128 57's
    # real view), a tile of lone blocks alone, beside FMA edges, several row groups, float32 widened
    ("float64", 114, 114, 5, 3, 1, "bulk", False),
    ("float64", 114, 114, 5, 3, 1, "bulk_inline", False),
    ("float64", 57, 57, 3, 3, 1, "bulk", False),
    ("float64", 13, 48, 1, 3, 2, "bulk", False),
    ("float64", 50, 50, 3, 2, 2, "vector", True),
    ("float64", 41, 20, 3, 2, 1, "vector", False),
    ("float32", 33, 17, 3, 3, 2, "vector", False),
]
LONE_PARAMETERS = ("dtype", "m", "n", "tile_m", "tile_n", "row_groups", "stage_copy", "fma_edges")


def lone_spec(dtype, m, n, tile_m, tile_n, row_groups, stage_copy, fma_edges) -> KernelSpec:
    """The kernel of a LONE_CASES row."""
    return two_passes_a_stage(Problem("atb", dtype, m, n), Config(
        tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups, mma=True, stage_copy=stage_copy,
        fma_edges=fma_edges, lone_transposed=True, blocks_per_sm=1))


@pytest.fixture(scope="module")
def lone_kernels_compiled(request):
    precompile_selected(request, "test_dmma_lone_transposed_path")


@pytest.mark.parametrize(", ".join(LONE_PARAMETERS), LONE_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_dmma_lone_transposed_path(dtype, m, n, tile_m, tile_n, row_groups, stage_copy, fma_edges, k,
                                   lone_kernels_compiled):
    """DMMA atb with its lone block of M against pairs of N's blocks (Config.lone_transposed):
    every entry within the error bound, through many rounds of the ring with a ragged last
    chunk, over batch items off a 16-byte boundary, and the same bits on every run."""
    rng = np.random.default_rng()
    spec = lone_spec(dtype, m, n, tile_m, tile_n, row_groups, stage_copy, fma_edges)
    a, b = operands(rng, "atb", dtype, k, m, n, (3,), (3,))
    check_forced(spec, "atb", a, b)


GAUSS_CASES = [  # M, N, tile_m, tile_n, row_groups, stage_copy, lone_transposed, fma_edges: whole warp tiles of 8 and 7
    # blocks, padded tiles, rows 1 apart (50), 2 apart (odd) and in padded groups of 8 (64, 13 x 48), several
    # row groups (the block reduction of complex sums), a lone padded block; the lone block of M transposed
    # against pairs of N's blocks, with a zero partner at odd tile_n (1x7 at 49, 1x3 at 13 x 48); bulk copies
    # inline (the 8 warps of 2x4 tiles at 57 with no producer warp to cap their registers)
    (57, 57, 4, 2, 1, "vector", False, False),
    (53, 53, 2, 2, 1, "vector", False, False),
    (50, 50, 3, 4, 1, "bulk", False, False),
    (64, 64, 2, 4, 1, "bulk", False, False),
    (13, 48, 2, 2, 3, "bulk", False, False),
    (57, 57, 2, 4, 1, "bulk_inline", False, False),
    (13, 48, 2, 2, 3, "bulk_inline", False, False),
    (61, 40, 2, 5, 2, "vector", False, False),
    (5, 3, 1, 1, 2, "vector", False, False),
    (49, 49, 1, 7, 1, "bulk", True, False),
    (49, 49, 1, 7, 1, "bulk_inline", True, False),
    (57, 57, 3, 4, 1, "bulk", True, False),
    (13, 48, 1, 3, 2, "bulk", True, False),
    (61, 40, 3, 2, 1, "vector", True, False),
    # with the edges past whole blocks on the FMA units (fma_edges, complex FMAs): both edges (50, 41 x 34),
    # the M edge alone (13 x 48), beside a transposed lone block (49), several row groups and vector copies
    (50, 50, 3, 2, 1, "bulk_inline", False, True),
    (49, 49, 3, 2, 1, "bulk", True, True),
    (41, 34, 2, 2, 2, "vector", False, True),
    (13, 48, 1, 3, 2, "bulk", True, True),
]
GAUSS_PARAMETERS = ("m", "n", "tile_m", "tile_n", "row_groups", "stage_copy", "lone_transposed", "fma_edges", "conj")


def gauss_spec(m, n, tile_m, tile_n, row_groups, stage_copy, lone_transposed, fma_edges, conj) -> KernelSpec:
    """The kernel of a GAUSS_CASES row."""
    return two_passes_a_stage(Problem("atb", "complex128", m, n, conj=conj), Config(
        tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups, mma=True, gauss=True,
        stage_copy=stage_copy, lone_transposed=lone_transposed, fma_edges=fma_edges, blocks_per_sm=1))


@pytest.fixture(scope="module")
def gauss_kernels_compiled(request):
    precompile_selected(request, "test_gauss_path")


@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize(", ".join(GAUSS_PARAMETERS[:-1]), GAUSS_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_gauss_path(m, n, tile_m, tile_n, row_groups, stage_copy, lone_transposed, fma_edges, conj, k,
                    gauss_kernels_compiled):
    """complex128 atb by Gauss's three real products on DMMA (Config.gauss), Aᵀ B and
    Aᴴ B: within the error bound, through many rounds of the ring with a ragged last
    chunk, over batch items off a 16-byte boundary (the long K on one item), and
    the same bits on every run."""
    rng = np.random.default_rng()
    spec = gauss_spec(m, n, tile_m, tile_n, row_groups, stage_copy, lone_transposed, fma_edges, conj)
    batch = () if k > 10**6 else (3,)
    a, b = operands(rng, "atb", "complex128", k, m, n, batch, batch)
    check_forced(spec, "atb", a, b, conj)


GAUSS_AB_CASES = [  # M, N, tile_m, tile_n, row_groups, stage_copy, stage_out: bulk rows 1 apart (52), 2 apart (50),
    # 4 apart (odd) and in padded groups of 8 or, with 2 slabs a pass, of 2 (48); vector rows padded to 4 mod 8
    # elements; a lone slab (m8n8k4); a ragged last k-step (M not a multiple of 4); N past the warps' last block;
    # several blocks a warp
    (52, 52, 1, 1, 2, "bulk", True),
    (50, 50, 2, 1, 1, "bulk", True),
    (57, 57, 4, 1, 1, "bulk", True),
    (48, 16, 4, 1, 2, "bulk", True),
    (48, 40, 2, 1, 1, "bulk", True),
    (53, 53, 2, 1, 1, "vector", False),
    (61, 40, 3, 1, 1, "vector", True),
    (13, 48, 1, 2, 1, "vector", False),
    (5, 3, 1, 1, 2, "vector", True),
]
GAUSS_AB_PARAMETERS = ("m", "n", "tile_m", "tile_n", "row_groups", "stage_copy", "stage_out")


def gauss_ab_spec(m, n, tile_m, tile_n, row_groups, stage_copy, stage_out) -> KernelSpec:
    """The kernel of a GAUSS_AB_CASES row."""
    return two_passes_a_stage(Problem("ab", "complex128", m, n), Config(
        tile_m=tile_m, tile_n=tile_n, mapping="blocked", row_groups=row_groups, mma=True, gauss=True,
        c_source="global", stage_out=stage_out, stage_copy=stage_copy, blocks_per_sm=1))


@pytest.fixture(scope="module")
def gauss_ab_kernels_compiled(request):
    precompile_selected(request, "test_gauss_ab_path")


@pytest.mark.parametrize(", ".join(GAUSS_AB_PARAMETERS), GAUSS_AB_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_gauss_ab_path(m, n, tile_m, tile_n, row_groups, stage_copy, stage_out, k, gauss_ab_kernels_compiled):
    """complex128 A C by Gauss's three real products on DMMA (Config.gauss): within the
    error bound, through many rounds of the ring with a ragged last chunk, over batch
    items (the long K on one item), and the same bits on every run."""
    rng = np.random.default_rng()
    spec = gauss_ab_spec(m, n, tile_m, tile_n, row_groups, stage_copy, stage_out)
    batch = () if k > 10**6 else (3,)
    a, c = operands(rng, "ab", "complex128", k, m, n, batch, batch)
    check_forced(spec, "ab", a, c)


RING_PARAMETERS = ("dtype", "m", "n", "kind", "update")
RING_CASES = [  # ab's cp.async ring on each kind of kernel, a complex one by its real view, the update
    ("float64", 5, 11, "fma", False),
    ("float32", 13, 4, "fma", True),
    ("float64", 43, 43, "dmma", False),
    ("float64", 37, 29, "dmma", True),
    ("float32", 49, 49, "tf32x3", False),
    ("float32", 60, 60, "wgmma", False),
    ("complex128", 21, 21, "dmma", False),
]


def ring_spec(dtype, m, n, kind, update) -> KernelSpec:
    """A RING_CASES row's kernel: the search's best-ranked candidate of that kind with
    the cp.async ring (not bulk copies), taking its chunks (Config.ring_takes_chunks)."""
    problem = Problem("ab", dtype, m, n, update=update)
    problem = _dispatch.real_view_problem(problem) or problem
    kinds = {"fma": lambda c: not c.mma, "dmma": lambda c: c.mma and not c.tf32x3,
             "tf32x3": lambda c: c.tf32x3 and not c.wgmma, "wgmma": lambda c: c.wgmma}
    config = next(c for c in candidates(problem, 64, "sm_90")
                  if kinds[kind](c) and c.stage_copy != "bulk" and c.mapping != "flat")
    return KernelSpec(problem, dataclasses.replace(config, ring_takes_chunks=True))


@pytest.fixture(scope="module")
def ring_kernels_compiled(request):
    precompile_selected(request, "test_ring_takes_chunks")


@pytest.mark.parametrize(", ".join(RING_PARAMETERS), RING_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_ring_takes_chunks(dtype, m, n, kind, update, k, ring_kernels_compiled):
    """ab's cp.async ring taking its chunks from the batch item's counter
    (Config.ring_takes_chunks): within the error bound, every chunk once, through
    many rounds of the ring with a ragged last chunk, over batch items (the long K
    on one item), and the same bits on every run (each element of out is still one
    thread's sum of the same products)."""
    rng = np.random.default_rng()
    spec = ring_spec(dtype, m, n, kind, update)
    assert spec.chunk_slots and not spec.bulk
    batch = () if k > 10**6 else (3,)
    if update:
        check_forced_update(Problem("ab", dtype, m, n, update=True), spec, rng, k, batch)
        return
    a, c = operands(rng, "ab", dtype, k, m, n, batch, batch)
    check_forced(spec, "ab", a, c)


WGMMA_CASES = [  # M, N, row_groups, rows_per_stage, stage_out, stage_copy: A's rows read 4 apart (odd M),
    # 2 apart (2 mod 4), 1 apart (4 mod 8), padded (multiples of 8); N padded to 8-column blocks, M to
    # k-steps of 8; bulk copies in and bulk stores out from two buffers, rows of a multiple of 8
    # (not of 32) unpadded and read in 16-byte (16 mod 32) or 8-byte (8 mod 16) vectors
    (49, 49, 4, 128, False, "vector"),
    (64, 64, 8, 128, True, "vector"),
    (33, 17, 4, 192, True, "vector"),
    (5, 3, 4, 128, False, "vector"),
    (40, 64, 8, 256, False, "vector"),
    (64, 1, 4, 64, True, "vector"),
    (50, 24, 4, 128, True, "vector"),
    (36, 9, 8, 128, False, "vector"),
    (41, 41, 8, 128, True, "bulk"),
    (50, 24, 4, 128, True, "bulk"),
    (36, 9, 8, 256, True, "bulk"),
    (5, 3, 4, 64, True, "bulk"),
    (48, 48, 4, 128, True, "bulk"),
    (16, 64, 8, 128, True, "bulk"),
    (24, 13, 8, 256, True, "bulk"),
    (40, 40, 4, 64, True, "bulk"),
    (8, 64, 4, 128, True, "bulk"),
    # An inner index M beyond 72 (complex64 ab's real views): k-steps in commit groups.
    (74, 74, 4, 64, True, "bulk"),
    (88, 88, 8, 128, False, "vector"),
    (102, 102, 4, 64, True, "bulk"),
    (112, 24, 4, 128, True, "bulk"),
    (104, 48, 4, 64, True, "bulk"),
    (128, 64, 4, 64, False, "vector"),
    (64, 128, 4, 64, True, "vector"),
]


WGMMA_PARAMETERS = ("m", "n", "row_groups", "rows_per_stage", "stage_out", "stage_copy")


def wgmma_spec(m, n, row_groups, rows_per_stage, stage_out, stage_copy) -> KernelSpec:
    """The kernel of a WGMMA_CASES row."""
    config = Config(tile_m=2, tile_n=-(-n // 8), mapping="blocked", row_groups=row_groups,
                    rows_per_stage=rows_per_stage, stages=3, mma=True, tf32x3=True, wgmma=True, c_source="shared",
                    stage_out=stage_out, stage_copy=stage_copy, blocks_per_sm=1)
    return KernelSpec(Problem("ab", "float32", m, n), config)


@pytest.fixture(scope="module")
def wgmma_kernels_compiled(request):
    """Compile the selected ``test_wgmma_path`` cases' kernels in parallel first (one
    at a time, the 24 cases' took 305 s of an H100 call, 2026-11-25)."""
    if has_wgmma(_cuda.arch()):
        precompile_selected(request, "test_wgmma_path")


@pytest.mark.parametrize(", ".join(WGMMA_PARAMETERS), WGMMA_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_wgmma_path(m, n, row_groups, rows_per_stage, stage_out, stage_copy, k, wgmma_kernels_compiled):
    """float32 ab through wgmma (Config.wgmma, sm_90a: C split in shared memory, 64
    rows per warpgroup and instruction): within float32's error bound, through many
    rounds of the ring with a ragged last chunk, over batch items off a 16-byte
    boundary, and the same bits on every run."""
    if not has_wgmma(_cuda.arch()):
        pytest.skip(f"wgmma runs on sm_90 only, this GPU is {_cuda.arch()}")
    rng = np.random.default_rng()
    spec = wgmma_spec(m, n, row_groups, rows_per_stage, stage_out, stage_copy)
    a, c = operands(rng, "ab", "float32", k, m, n, (3,), (1,))
    check_forced(spec, "ab", a, c)


@pytest.mark.parametrize("op, wgmma", [("atb", False), ("ab", False), ("ab", True)])
def test_tf32x3_keeps_float32_accuracy_on_positive_data(op, wgmma):
    """All-positive operands (no cancellation, so a biased rounding shows): 3xTF32's
    largest error relative to |A|ᵀ|B| stays within 4x that of XLA's float32 dot
    at HIGHEST precision on the same operands (ab through mma.sync and wgmma)."""
    if wgmma and not has_wgmma(_cuda.arch()):
        pytest.skip(f"wgmma runs on sm_90 only, this GPU is {_cuda.arch()}")
    rng = np.random.default_rng()
    m, n, k = (40, 40, 2**20 + 3) if op == "atb" else (64, 48, 100_003)
    problem = Problem(op, "float32", m, n)
    spec = KernelSpec(problem, next(c for c in candidates(problem, limit=64) if c.tf32x3 and c.wgmma == wgmma))
    a = np.abs(random_operand(rng, (k, m), "float32"))
    b = np.abs(random_operand(rng, (k, n) if op == "atb" else (m, n), "float32"))
    with _dispatch.forced(spec):
        ours = to_wide(run(op, a, b))
    xla = to_wide(jnp.matmul(a.T if op == "atb" else a, b, precision=lax.Precision.HIGHEST))
    want, scale = reference(op, a, b), magnitude(op, a, b)
    ours_error, xla_error = np.max(np.abs(ours - want) / scale), np.max(np.abs(xla - want) / scale)
    assert ours_error <= 4 * max(xla_error, unit_roundoff("float32")), (spec.name, ours_error, xla_error)


# --- ab's fused update: beta * y + alpha * A C in one pass ---------------------------

UPDATE_CASES = [  # dtype, M, N, alpha, beta, batch of a and y
    ("float64", 8, 16, -1, 1, ()),
    ("float64", 64, 64, -1, 1, ()),
    ("float32", 5, 7, 2.5, -0.5, (3,)),
    ("float32", 48, 40, -1, 1, (2,)),  # on the FP64 tensor cores
    ("complex128", 3, 9, 1 - 2j, 0.5j, ()),
    ("complex64", 16, 16, -1, 1, (2,)),
]


@pytest.mark.parametrize("k", [1, 1000, 100_003])
@pytest.mark.parametrize("dtype, m, n, alpha, beta, batch", UPDATE_CASES)
def test_fused_update(dtype, m, n, alpha, beta, batch, k):
    rng = np.random.default_rng()
    a = random_operand(rng, batch + (k, m), dtype)
    c = random_operand(rng, (m, n), dtype)
    y = random_operand(rng, batch + (k, n), dtype)
    assert _dispatch.select("ab", dtype, m, n, k, len(batch), False, _cuda.arch(), update=True) is not None
    poison(y.nbytes)
    got = jax.jit(lambda a, c, y: jax_tsmm.ab(a, c, out=y, alpha=alpha, beta=beta))(a, c, y)
    want = alpha * ab_ref(a, c) + beta * to_wide(y)
    bound = 16 * unit_roundoff(dtype) * (abs(alpha) * magnitude("ab", a, c) + abs(beta) * np.abs(to_wide(y)))
    assert np.all(np.abs(to_wide(got) - want) <= bound + 1e-30)


FAST_UPDATE_CASES = [  # dtype, M, N, path, stage_copy, y_in_out: the fused update with staged output on ab's
    # paths. Bulk copies stage y's rows beside A's (KernelSpec.stages_y): rows spaced within a span (33), in padded
    # groups (40), N odd (17 x 5, 49 x 13); vector copies stage y in the issue step (FMA tiles too). With
    # y_in_out, y comes through out's buffers instead (float32 100: complex64 50's real view).
    ("float64", 33, 33, "dmma", "bulk", False),
    ("float64", 40, 24, "dmma", "bulk", False),
    ("float64", 17, 5, "dmma", "bulk", False),
    ("float32", 40, 40, "wgmma", "bulk", False),
    ("float32", 49, 13, "wgmma", "bulk", False),
    ("float32", 64, 64, "wgmma", "vector", False),
    ("complex128", 48, 48, "gauss", "bulk", False),
    ("complex128", 53, 21, "gauss", "vector", False),
    ("float64", 33, 33, "dmma", "vector", False),
    ("complex64", 9, 7, "fma", "vector", False),
    ("float64", 33, 33, "dmma", "bulk", True),
    ("float64", 17, 5, "dmma", "bulk", True),
    ("float32", 49, 13, "wgmma", "bulk", True),
    ("float32", 100, 100, "wgmma", "bulk", True),
    ("complex128", 48, 48, "gauss", "bulk", True),
]
FAST_UPDATE_PARAMETERS = ("dtype", "m", "n", "path", "stage_copy", "y_in_out")


def fast_update_spec(dtype, m, n, path, stage_copy, y_in_out) -> KernelSpec:
    """The kernel of a FAST_UPDATE_CASES row: staged output, as each path needs with the update."""
    problem = Problem("ab", dtype, m, n, update=True)
    if path == "fma":
        return KernelSpec(problem, next(c for c in candidates(problem, 64) if c.stage_out and not c.mma))
    if path == "wgmma":
        return KernelSpec(problem, dataclasses.replace(wgmma_config(problem), row_groups=4, rows_per_stage=64, stages=3,
                                                       stage_copy=stage_copy, y_in_out=y_in_out, blocks_per_sm=1))
    return two_passes_a_stage(problem, Config(
        tile_m=2, tile_n=min(2, -(-n // 8)), mapping="blocked", row_groups=2 if path == "dmma" else 1,
        c_source="global", mma=True, gauss=path == "gauss", stage_out=True, stage_copy=stage_copy, y_in_out=y_in_out,
        blocks_per_sm=1))


@pytest.fixture(scope="module")
def fast_update_kernels_compiled(request):
    precompile_selected(request, "test_fused_update_fast_paths")


@pytest.mark.parametrize("scales", ["in_place", "general"])
@pytest.mark.parametrize(", ".join(FAST_UPDATE_PARAMETERS), FAST_UPDATE_CASES)
@pytest.mark.parametrize("k", [1, 37, 100_003, 10**6 + 7])
def test_fused_update_fast_paths(dtype, m, n, path, stage_copy, y_in_out, scales, k, fast_update_kernels_compiled):
    """ab's fused update on the bulk-copy, wgmma, Gauss and FMA kernels, y staged beside
    A (KernelSpec.stages_y) or in out's buffers (Config.y_in_out): V - Q C written
    over V (donated), and general alpha and beta; within the error bound, through
    many rounds of the ring with a ragged last chunk, over batch items off a 16-byte
    boundary (odd K * N; the long K on one item). (beta = 0 lowers to plain ab:
    test_cuda_lowering.)"""
    spec = fast_update_spec(dtype, m, n, path, stage_copy, y_in_out)
    assert spec.stages_y != y_in_out and spec.bulk == (stage_copy == "bulk")
    alpha, beta = (-1, 1) if scales == "in_place" else (1 - 2j, 0.5j) if dtype.startswith("complex") else (2.5, -0.5)
    check_forced_update(spec.problem, spec, np.random.default_rng(), k, () if k > 10**6 else (3,), alpha, beta)


def test_fused_update_is_one_pass_in_place():
    """V - Q C with V donated: the compiled program is the one custom call, which
    writes into V's buffer (no copy of V, no elementwise pass over it)."""
    rng = np.random.default_rng()
    k, m, n = 1 << 20, 8, 16
    q = jnp.asarray(random_operand(rng, (k, m), "float64"))
    c = jnp.asarray(random_operand(rng, (m, n), "float64"))
    v = jnp.asarray(random_operand(rng, (k, n), "float64"))
    want = to_wide(v) - ab_ref(q, c)
    update = jax.jit(lambda q, c, v: jax_tsmm.ab(q, c, out=v, alpha=-1, beta=1), donate_argnums=2)
    compiled = update.lower(q, c, v).compile().as_text()
    touching_v = [line for line in compiled.splitlines()  # the call, not its result's read out of the tuple
                  if f"[{k},{n}]" in line and " = " in line
                  and not any(word in line for word in ("parameter(", "get-tuple-element("))]
    assert len(touching_v) == 1 and "tsmm_ab_update" in touching_v[0], touching_v
    v_buffer = v.unsafe_buffer_pointer()
    got = update(q, c, v)
    assert got.unsafe_buffer_pointer() == v_buffer
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-12 * np.abs(want).max())
    projected = jax.jit(jax_tsmm.linalg.project_out).lower(q, got).compile().as_text()
    assert "tsmm_ab_update" in projected and '"tsmm_ab"' not in projected


def test_calls_inside_a_jitted_loop():
    """Kernels inside fori_loop, first called there: XLA may capture the calls into
    a CUDA graph (the handlers are command-buffer compatible); every iteration
    must still compute the product."""
    rng = np.random.default_rng()
    a, b = operands(rng, "atb", "float32", 4099, 19, 21)
    c = random_operand(rng, (19, 21), "float32")

    def body(_, carry):
        x, y, z = lax.optimization_barrier((a, b, c))  # no hoisting out of the loop
        return carry[0] + jax_tsmm.atb(x, y), carry[1] + jax_tsmm.ab(x, z)

    zeros = (jnp.zeros((19, 21), jnp.float32), jnp.zeros((4099, 21), jnp.float32))
    gram, prod = jax.jit(lambda: lax.fori_loop(0, 4, body, zeros))()
    assert_close(np.asarray(gram) / 4, a, b, op="atb")
    assert_close(np.asarray(prod) / 4, a, c, op="ab")


def _tuned_cases() -> dict[str, list[tuple[Problem, KernelSpec]]]:
    """Database key -> (the call's problem, its kernel: a real view's for a complex
    call where the entry says so) of every entry naming a kernel in the shipped
    tuning databases of this architecture (its own and its GPU models')."""
    cases = {}
    for path in sorted(_dispatch.TUNING_DIR.glob(f"{_cuda.arch()}.*json")):
        for key, entries in json.loads(path.read_text())["entries"].items():
            if key.startswith("mtsm"):
                continue
            problem = key_problem(key)
            for e in entries:
                if e["config"] is not None:
                    kernel = _dispatch.real_view_problem(problem) if e.get("real_view") else problem
                    cases.setdefault(key, []).append((problem, KernelSpec(kernel, Config(**e["config"]))))
    return {key: list(dict.fromkeys(found)) for key, found in cases.items()}


TUNED_CASES = _tuned_cases()


# The families of tests whose kernels are compiled before their first case runs (and,
# by scripts/precompile_tests.py, ahead on any machine): per test, the parameters that
# pick a case's kernels, and those kernels.
def run_gram(a, conj=False):
    """atb(a, a, conj) under jit with one value as both operands (a Gram matrix), on poisoned memory."""
    poison(a.shape[-1] ** 2 * 16 * max(1, int(np.prod(a.shape[:-2], dtype=np.int64))))
    return jax.jit(lambda x: jax_tsmm.atb(x, x, conj=conj))(a)


def gram_kernel(a, conj=False) -> str:
    """The kernel jit(atb(a, a, conj)) lowers to ("" for XLA's dot)."""
    hlo = jax.jit(lambda x: jax_tsmm.atb(x, x, conj=conj)).lower(a).as_text()
    names = re.findall(r'kernel = "(tsmm_atb\w*)"', hlo)
    return names[0] if names else ""


GRAM_CASES = [  # one per family of staging and arithmetic; None: the model's configuration
    ("float64", 5, False, None),
    ("complex64", 9, True, Config(tile_m=4, tile_n=3, row_groups=16, rows_per_stage=32, stages=4, unroll=2)),
    ("float64", 6, False, Config(tile_m=2, tile_n=3, row_groups=16, rows_per_stage=32, padded=True, m_panels=2)),
    ("float64", 57, False, Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=3, rows_per_stage=48, stages=4,
                                  mma=True, stage_copy="bulk", blocks_per_sm=1)),
    ("float32", 45, False, Config(tile_m=2, tile_n=5, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3,
                                  mma=True, tf32x3=True, fma_edges=True)),
    ("complex128", 50, True, Config(tile_m=3, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2,
                                    mma=True, gauss=True, fma_edges=True, stage_copy="bulk_inline", blocks_per_sm=1)),
    ("float32", 64, False, None),
    # the triangle alone (Config.triangle): FMA interleaved (Aᴴ A), DMMA with bulk copies, Gauss's Aᴴ A,
    # 3xTF32's transposed lone block in two row groups, DMMA's transposed lone block of a 5-block edge,
    # DMMA's and Gauss's tiles past the width (7 and 3 blocks a side), whose idle blocks are skipped;
    # with the FMA units' N edge mirrored (fma_edges), from the diagonal tiles' fragments: DMMA, Gauss's
    # Aᴴ A, DMMA's transposed lone block with an edge of 7 columns
    ("complex64", 7, True, Config(tile_m=2, tile_n=2, row_groups=16, rows_per_stage=32, stages=4, unroll=2,
                                  triangle=True)),
    ("float64", 64, False, Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=64, stages=4,
                                  mma=True, stage_copy="bulk", blocks_per_sm=1, triangle=True)),
    ("complex128", 24, True, Config(tile_m=1, tile_n=1, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2,
                                    mma=True, gauss=True, stage_copy="bulk_inline", blocks_per_sm=1, triangle=True)),
    ("float32", 40, False, Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=64, stages=4,
                                  mma=True, tf32x3=True, stage_copy="bulk", triangle=True)),
    ("float64", 37, False, Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=3, rows_per_stage=48, stages=3,
                                  mma=True, lone_transposed=True, triangle=True)),
    ("float64", 51, False, Config(tile_m=4, tile_n=4, mapping="blocked", row_groups=4, rows_per_stage=128, stages=2,
                                  mma=True, stage_copy="bulk", blocks_per_sm=1, triangle=True)),
    ("complex128", 20, True, Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=2, rows_per_stage=64, stages=2,
                                    mma=True, gauss=True, stage_copy="bulk", blocks_per_sm=1, triangle=True)),
    ("float64", 49, False, Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=4, rows_per_stage=256, stages=2,
                                  mma=True, stage_copy="bulk", fma_edges=True, blocks_per_sm=1, triangle=True)),
    ("complex128", 50, True, Config(tile_m=2, tile_n=2, mapping="blocked", row_groups=1, rows_per_stage=32, stages=2,
                                    mma=True, gauss=True, fma_edges=True, stage_copy="bulk_inline", blocks_per_sm=1,
                                    triangle=True)),
    ("float64", 55, False, Config(tile_m=3, tile_n=3, mapping="blocked", row_groups=2, rows_per_stage=64, stages=3,
                                  mma=True, lone_transposed=True, stage_copy="bulk", fma_edges=True, blocks_per_sm=1,
                                  triangle=True)),
]


def test_conjugated_product_where_xla_won_the_unconjugated(tuned_dispatch):
    """complex128 Aᴴ B of 32 x 32 at K = 2^21, where the shipped databases chose
    XLA's dot for Aᵀ B: dispatch runs a kernel (XLA's Aᴴ B is far slower), right."""
    k, m = 1 << 21, 32
    if _dispatch.select("atb", "complex128", m, m, k, 0, False, _cuda.arch(), _cuda.device_kind()) is not None:
        pytest.skip("this GPU's database chose a kernel for Aᵀ B here")
    spec = _dispatch.select("atb", "complex128", m, m, k, 0, True, _cuda.arch(), _cuda.device_kind())
    assert spec is not None
    a, b = operands(np.random.default_rng(), "atb", "complex128", k, m, m)
    assert f'kernel = "{spec.name}"' in jax.jit(lambda x, y: jax_tsmm.atb(x, y, conj=True)).lower(a, b).as_text()
    assert_close(run("atb", a, b, conj=True), a, b, op="atb", conj=True)


GRAM_PARAMETERS = ("dtype", "m", "conj", "config")


def gram_spec(dtype, m, conj, config) -> KernelSpec:
    problem = Problem("atb", dtype, m, m, conj=conj, gram=True)
    return KernelSpec(problem, config or default_config(problem, "sm_90"))


@pytest.fixture(scope="module")
def gram_kernels_compiled(request):
    precompile_selected(request, "test_gram_kernels")


@pytest.mark.parametrize("k", [37, 100_003])
@pytest.mark.parametrize(", ".join(GRAM_PARAMETERS), GRAM_CASES)
def test_gram_kernels(dtype, m, conj, config, k, gram_kernels_compiled):
    """A Gram matrix's kernel (one operand staged once, read as both) forced on
    atb(a, a): it runs, within the error bound, the same bits on a second run. The
    bound is that of any data: the diagonal sums positive terms, |a_i|². The
    triangle's kernels give an exactly Hermitian (symmetric) result."""
    spec = gram_spec(dtype, m, conj, config)
    a = random_operand(np.random.default_rng(), (k, m), dtype)
    with _dispatch.forced(spec):
        assert gram_kernel(a, conj) == spec.name
        out, again = run_gram(a, conj), run_gram(a, conj)
    assert_close(out, a, a, op="atb", conj=conj, random_data=False, err_msg=spec.name)
    assert np.array_equal(np.asarray(out), np.asarray(again))
    if spec.config.triangle:
        mirrored = np.conj(np.asarray(out)).T if conj else np.asarray(out).T
        assert np.array_equal(np.asarray(out), mirrored)


@pytest.mark.parametrize("dtype, m, batch", [("float64", 8, ()), ("float32", 48, ()), ("complex128", 16, (3,)),
                                             ("complex64", 7, (2,)), ("complex128", 32, ()), ("float64", 20, ()),
                                             ("float64", 29, (2,)), ("float32", 30, ()), ("complex64", 62, ())])
def test_gram_matrices_as_dispatched(dtype, m, batch, tuned_dispatch):
    """atb(v, v, conj=True) as Cholesky-QR calls it, under vmap where batched: the
    Gram kernel dispatch picks with the shipped database, right (the bound of any
    data: the diagonal sums positive terms); float64 20 and 29 atb's kernels
    carried to bulk copies, float32 30 and complex64 62 to DMMA triangles
    (``carried_to_gram``)."""
    rng = np.random.default_rng()
    k = 300_007
    conj = dtype.startswith("complex")
    a = random_operand(rng, batch + (k, m), dtype)
    spec = _dispatch.select("atb", dtype, m, m, k, 0, conj, _cuda.arch(), _cuda.device_kind(), gram=True)
    assert spec is not None and spec.problem.gram
    call = (lambda x: jax_tsmm.atb(x, x, conj=conj))
    for _ in batch:
        call = jax.vmap(call)
    hlo = jax.jit(call).lower(a).as_text()
    assert f'kernel = "{spec.name}"' in hlo
    poison(m * m * 16 * max(1, int(np.prod(batch))))
    assert_close(jax.jit(call)(a), a, a, op="atb", conj=conj, random_data=False)


KERNEL_FAMILIES = {
    "test_shapes": (("op", "dtype", "m", "n", "conj", "k"), model_kernel),
    "test_fma_edges_path": (EDGE_PARAMETERS, lambda *case: [edge_spec(*case)]),
    "test_dmma_lone_transposed_path": (LONE_PARAMETERS, lambda *case: [lone_spec(*case)]),
    "test_gauss_path": (GAUSS_PARAMETERS, lambda *case: [gauss_spec(*case)]),
    "test_gauss_ab_path": (GAUSS_AB_PARAMETERS, lambda *case: [gauss_ab_spec(*case)]),
    "test_ring_takes_chunks": (RING_PARAMETERS, lambda *case: [ring_spec(*case)]),
    "test_wgmma_path": (WGMMA_PARAMETERS, lambda *case: [wgmma_spec(*case)]),
    "test_fused_update_fast_paths": (FAST_UPDATE_PARAMETERS, lambda *case: [fast_update_spec(*case)]),
    "test_tuned_kernels": (("key",), lambda key: [spec for _, spec in TUNED_CASES[key]]),
    "test_gram_kernels": (GRAM_PARAMETERS, lambda *case: [gram_spec(*case)]),
}


@pytest.fixture(scope="module")
def tuned_kernels_compiled(request):
    precompile_selected(request, "test_tuned_kernels")


@pytest.mark.parametrize("key", sorted(TUNED_CASES))
def test_tuned_kernels(key, tuned_kernels_compiled):
    """Every kernel configuration the shipped tuning databases choose for atb, ab,
    ab's fused update and the Gram matrix (complex calls' real views included), one
    database key a case (``-k 'atb:complex128:37x37'`` runs one), on fresh random
    operands of an odd K. (tests/test_mtsm_gpu.py runs their mtsm entries.)"""
    rng = np.random.default_rng()
    for p, spec in TUNED_CASES[key]:
        k = 3 * spec.rows_per_chunk + 5
        if p.update:
            check_forced_update(p, spec, rng, k)
            continue
        if p.gram:  # one value passed as both operands
            a = random_operand(rng, (k, p.m), p.dtype)
            with _dispatch.forced(spec):
                assert gram_kernel(a, p.conj) == spec.name
                out = run_gram(a, p.conj)
            assert_close(out, a, a, op="atb", conj=p.conj, random_data=False, err_msg=spec.name)
            continue
        a, b = operands(rng, p.op, p.dtype, k, p.m, p.n)
        with _dispatch.forced(spec):
            out = run(p.op, a, b)
        assert_close(out, a, b, op=p.op, err_msg=spec.name)
