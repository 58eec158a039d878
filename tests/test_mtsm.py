"""mtsm (a large dense A, or Aᵀ, times a tall & skinny X): values against the
float64 / complex128 NumPy reference, JAX transformations and error messages.

op(A) X with transpose_a=False is the reference's "ab" product (A (..., M, K),
X (..., K, N)), op(A)ᵀ X with transpose_a=True its "atb" product (A (..., K, M));
both are checked under reference.py's elementwise error bound.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads

import jax_tsmm
from jax_tsmm import _dispatch, _kernels, _mtsm
from jax_tsmm._mtsm import mtsm_p
from jax_tsmm._mtsm import select as mtsm_select
from jax_tsmm.codegen import mtsm as mtsm_codegen
from jax_tsmm.codegen import search
from reference import (
    DERIVATIVE_RTOL,
    assert_derivatives_match,
    assert_tree_close,
    random_jax_operands,
    ALL_DTYPES,
    assert_close,
    assert_same,
    dtype_id,
    is_complex,
    random_operand,
)

HIGHEST = lax.Precision.HIGHEST


def ref_op(transpose_a):
    return "atb" if transpose_a else "ab"


def a_shape(transpose_a, m, k):
    return (k, m) if transpose_a else (m, k)


def mtsm_jnp(a, x, transpose_a=False, conj=False):
    a = jnp.conj(a) if conj else a
    a = jnp.swapaxes(a, -1, -2) if transpose_a else a
    return jnp.matmul(a, x, precision=HIGHEST)


# --- values ------------------------------------------------------------------------------

# (batch of a, batch of x, M, K, N)
CASES = [
    ((), (), 37, 53, 1),
    ((), (), 40, 129, 64),
    ((3,), (), 20, 31, 5),
    ((2, 1), (4,), 9, 17, 3),
    ((1,), (3, 2), 6, 13, 2),
    ((2, 3), (2, 3), 5, 257, 16),
]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_values(dtype, transpose_a, case):
    batch_a, batch_x, m, k, n = case
    rng = np.random.default_rng(0)
    a = random_operand(rng, batch_a + a_shape(transpose_a, m, k), dtype)
    x = random_operand(rng, batch_x + (k, n), dtype)
    for conj in (False, True) if is_complex(dtype) else (False,):
        out = jax_tsmm.mtsm(a, x, transpose_a=transpose_a, conj=conj)
        assert_close(out, a, x, op=ref_op(transpose_a), conj=conj, err_msg=f"transpose_a={transpose_a}")


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_jit_equals_eager(dtype, transpose_a):
    rng = np.random.default_rng(10)
    a = random_operand(rng, (2, 1) + a_shape(transpose_a, 24, 67), dtype)
    x = random_operand(rng, (3, 67, 5), dtype)
    conj = is_complex(dtype)
    f = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj)
    eager = f(a, x)
    with jax.disable_jit():
        assert_same(f(a, x), eager, a, x, op=ref_op(transpose_a), err_msg="disable_jit vs eager")
    assert_same(jax.jit(f)(a, x), eager, a, x, op=ref_op(transpose_a), err_msg="jit vs eager")


def test_conj_is_ignored_for_real_operands():
    rng = np.random.default_rng(1)
    a, x = random_jax_operands(rng, "float64", (7, 5), (5, 2))
    np.testing.assert_array_equal(jax_tsmm.mtsm(a, x, conj=True), jax_tsmm.mtsm(a, x))
    jaxpr = str(jax.make_jaxpr(lambda a, x: jax_tsmm.mtsm(a, x, conj=True))(a, x))
    assert "conj=False" in jaxpr


@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("m, k, n", [(0, 5, 2), (4, 0, 2), (4, 5, 0), (0, 0, 0)])
def test_empty_dims(transpose_a, m, k, n):
    a = jnp.ones(a_shape(transpose_a, m, k))
    x = jnp.ones((k, n))
    out = jax.jit(functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a))(a, x)
    assert out.shape == (m, n)
    np.testing.assert_array_equal(np.asarray(out), 0)
    loss = lambda f: lambda a, x: jnp.sum((f(a, x, transpose_a=transpose_a) + 1) ** 2)
    assert_tree_close(
        jax.grad(loss(jax_tsmm.mtsm), (0, 1))(a, x), jax.grad(loss(mtsm_jnp), (0, 1))(a, x), 1e-12
    )


@pytest.mark.parametrize("dtype", ("bfloat16", "float16", "float32"))
def test_lowering_is_a_highest_precision_dot_without_transpose(dtype):
    """XLA's dot at HIGHEST precision, float32 accumulation for the half dtypes,
    and no transpose of A."""
    a = jnp.ones((6, 5), dtype)
    x = jnp.ones((6, 2), dtype)
    text = jax.jit(functools.partial(jax_tsmm.mtsm, transpose_a=True)).lower(a, x).as_text()
    assert "dot_general" in text and "HIGHEST" in text
    assert "transpose" not in text
    if dtype != "float32":
        assert re.search(r"dot_general.*-> tensor<5x2xf32>", text), text


# --- derivatives -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, conj, batched",
    [("float64", False, False), ("float64", False, True), ("complex128", True, False),
     ("complex128", False, True)],
    ids=str,
)
@pytest.mark.parametrize("transpose_a", (False, True))
def test_check_grads(dtype, conj, batched, transpose_a):
    rng = np.random.default_rng(2)
    m, k, n = 4, 6, 2
    if batched:
        shapes = ((2, 1) + a_shape(transpose_a, m, k), (3, k, n))
    else:
        shapes = (a_shape(transpose_a, m, k), (k, n))
    a, x = random_jax_operands(rng, dtype, *shapes)
    f = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj)
    check_grads(f, (a, x), order=2, modes=("fwd", "rev"))
    if batched and dtype == "complex128" and transpose_a:
        check_grads(jax.jit(f), (a, x), order=2, modes=("fwd", "rev"))


def make_loss(mtsm, transpose_a, conj):
    def loss(a, x):
        y = mtsm(a, x, transpose_a=transpose_a, conj=conj)
        extra = jnp.real(y) * jnp.imag(y) if jnp.iscomplexobj(y) else jnp.tanh(y)
        return jnp.sum(jnp.abs(y) ** 2) + jnp.sum(extra)

    return loss


@pytest.mark.parametrize(
    "dtype, conj",
    [("float64", False), ("complex128", False), ("complex128", True), ("complex64", True)],
    ids=str,
)
@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("batched", (False, True))
def test_grad_matches_jnp(dtype, conj, transpose_a, batched):
    rng = np.random.default_rng(3)
    m, k, n = 30, 41, 3
    if batched:
        shapes = ((3, 1) + a_shape(transpose_a, m, k), (2, k, n))
    else:
        shapes = (a_shape(transpose_a, m, k), (k, n))
    a, x = random_jax_operands(rng, dtype, *shapes)
    rtol = DERIVATIVE_RTOL[np.dtype(dtype)]
    lt = make_loss(jax_tsmm.mtsm, transpose_a, conj)
    lj = make_loss(mtsm_jnp, transpose_a, conj)
    transforms = [lambda f: jax.jit(jax.grad(f, argnums=(0, 1)))]
    if dtype == "complex128" and batched:
        transforms.append(lambda f: jax.grad(jax.checkpoint(f), argnums=(0, 1)))
    for transform in transforms:
        assert_tree_close(transform(lt)(a, x), transform(lj)(a, x), rtol, "grad")


@pytest.mark.parametrize("dtype", ("float64", "complex128"))
@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("conj", (False, True))
def test_jvp_vjp_linearize(dtype, transpose_a, conj):
    rng = np.random.default_rng(4)
    m, k, n = 5, 9, 3
    sa, sx = (2,) + a_shape(transpose_a, m, k), (k, n)
    a, x, da, dx = random_jax_operands(rng, dtype, sa, sx, sa, sx)
    ft = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj)
    fj = functools.partial(mtsm_jnp, transpose_a=transpose_a, conj=conj)
    assert_derivatives_match(ft, fj, (a, x), (da, dx), rng, DERIVATIVE_RTOL[np.dtype(dtype)])


@pytest.mark.parametrize("transpose_a", (False, True))
def test_jacfwd_jacrev(transpose_a):
    rng = np.random.default_rng(5)
    f64 = random_jax_operands(rng, "float64", a_shape(transpose_a, 4, 6), (6, 2))
    c128 = random_jax_operands(rng, "complex128", a_shape(transpose_a, 4, 6), (6, 2))
    ft = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a)
    fj = functools.partial(mtsm_jnp, transpose_a=transpose_a)
    for jac in (jax.jacfwd, jax.jacrev):
        assert_tree_close(jac(ft, (0, 1))(*f64), jac(fj, (0, 1))(*f64), 1e-12, jac.__name__)
        # Without conj the product is holomorphic in each operand.
        got = jac(ft, (0, 1), holomorphic=True)(*c128)
        want = jac(fj, (0, 1), holomorphic=True)(*c128)
        assert_tree_close(got, want, 1e-12, jac.__name__ + " holomorphic")


def test_hessian():
    rng = np.random.default_rng(6)
    a, x = random_jax_operands(rng, "float64", (5, 4), (5, 2))
    for transpose_a in (False, True):
        a_ = a if transpose_a else a.T
        lt = make_loss(jax_tsmm.mtsm, transpose_a, False)
        lj = make_loss(mtsm_jnp, transpose_a, False)
        assert_tree_close(
            jax.jit(jax.hessian(lt, (0, 1)))(a_, x), jax.jit(jax.hessian(lj, (0, 1)))(a_, x), 1e-10,
            "hessian",
        )


@pytest.mark.parametrize("transpose_a", (False, True))
def test_gradient_rules(transpose_a):
    """x's cotangent is mtsm with transpose_a flipped; a's is XLA's dot."""
    a = jnp.ones(a_shape(transpose_a, 4, 6))
    x = jnp.ones((6, 2))
    f = lambda a, x: jnp.sum(jax_tsmm.mtsm(a, x, transpose_a=transpose_a))
    jaxpr = str(jax.make_jaxpr(jax.grad(f, (0, 1)))(a, x))
    assert f"tsmm_mtsm[conj=False transpose_a={not transpose_a}]" in jaxpr
    assert jaxpr.count("dot_general") == 1
    jaxpr = str(jax.make_jaxpr(jax.grad(f, 1))(a, x))
    assert "dot_general" not in jaxpr


# --- vmap ----------------------------------------------------------------------------------

V = 3


def _stacked(rng, shape, dtype, axis):
    if axis is None:
        x = random_operand(rng, shape, dtype)
        return x, [x] * V
    slices = [random_operand(rng, shape, dtype) for _ in range(V)]
    return np.stack(slices, axis=axis), slices


IN_AXES = [(0, 0), (0, None), (None, 0), (1, -1), (-1, 1)]


@pytest.mark.parametrize("in_axes", IN_AXES, ids=str)
@pytest.mark.parametrize("transpose_a", (False, True))
@pytest.mark.parametrize("dtype", ("float32", "complex128"))
def test_vmap_in_axes(dtype, transpose_a, in_axes):
    rng = np.random.default_rng(7)
    m, k, n = 13, 21, 3
    a, as_ = _stacked(rng, a_shape(transpose_a, m, k), dtype, in_axes[0])
    x, xs = _stacked(rng, (k, n), dtype, in_axes[1])
    conj = is_complex(dtype)
    f = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=conj)
    out = jax.vmap(f, in_axes=in_axes)(a, x)
    out_jit = jax.jit(jax.vmap(f, in_axes=in_axes))(a, x)
    jaxpr = str(jax.make_jaxpr(jax.vmap(f, in_axes=in_axes))(a, x))
    assert jaxpr.count("tsmm_mtsm") == 1  # one batched primitive, no loop
    for i in range(V):
        assert_close(out[i], as_[i], xs[i], op=ref_op(transpose_a), conj=conj, err_msg=f"slice {i}")
        assert_same(out_jit[i], out[i], as_[i], xs[i], op=ref_op(transpose_a), err_msg="jit(vmap)")


@pytest.mark.parametrize("transpose_a", (False, True))
def test_nested_vmap_and_batched_operands(transpose_a):
    """vmap over a inside vmap over x (every pair), operands with own batch axes."""
    rng = np.random.default_rng(8)
    m, k, n, W = 7, 11, 2, 2
    a = random_operand(rng, (V, 2, 1) + a_shape(transpose_a, m, k), "float64")
    x = random_operand(rng, (W, 3, k, n), "float64")
    f = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a)
    out = jax.vmap(jax.vmap(f, in_axes=(0, None)), in_axes=(None, 0))(a, x)
    assert out.shape == (W, V, 2, 3, m, n)
    for i in range(V):
        for j in range(W):
            assert_close(out[j, i], a[i], x[j], op=ref_op(transpose_a))


@pytest.mark.parametrize("transpose_a", (False, True))
def test_vmap_of_grad(transpose_a):
    rng = np.random.default_rng(9)
    a, x = random_jax_operands(rng, "complex128", (V,) + a_shape(transpose_a, 5, 8), (V, 8, 2))
    lt = make_loss(jax_tsmm.mtsm, transpose_a, True)
    lj = make_loss(mtsm_jnp, transpose_a, True)
    g = jax.jit(jax.vmap(jax.grad(lt, (0, 1))))(a, x)
    for i in range(V):
        assert_tree_close((g[0][i], g[1][i]), jax.grad(lj, (0, 1))(a[i], x[i]), 1e-10, f"example {i}")


# --- errors ----------------------------------------------------------------------------------


def f64(*shape):
    return np.ones(shape, np.float64)


def raises_everywhere(fn, args, exc, match, **kwargs):
    """``fn(*args)`` raises eagerly, under jit, make_jaxpr, eval_shape and vmap."""
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    f = lambda *xs: fn(*xs, **kwargs)
    for transform in (jax.jit(f), jax.make_jaxpr(f), functools.partial(jax.eval_shape, f)):
        with pytest.raises(exc, match=match):
            transform(*args)
    with pytest.raises(exc, match=match):
        jax.jit(jax.vmap(f))(*[x[None] for x in args])


@pytest.mark.parametrize("a, x, name", [(f64(5), f64(5, 2), "a"), (f64(), f64(5, 2), "a"),
                                        (f64(5, 3), f64(3), "x")])
def test_rank(a, x, name):
    shape = (a if name == "a" else x).shape
    match = re.escape(f"jax_tsmm.mtsm: {name} must have rank >= 2, got shape {shape}")
    raises_everywhere(jax_tsmm.mtsm, (a, x), ValueError, match)


@pytest.mark.parametrize(
    "transpose_a, a_shape_, x_shape",
    [(False, (5, 3), (5, 2)), (False, (2, 7, 3), (4, 2)), (True, (5, 3), (3, 2)),
     (True, (0, 3), (1, 2))],
)
def test_contracted_dimension_mismatch(transpose_a, a_shape_, x_shape):
    axis = -2 if transpose_a else -1
    match = re.escape(
        f"jax_tsmm.mtsm: contracted dimension K differs: a has shape {a_shape_}, x has shape "
        f"{x_shape} (transpose_a={transpose_a} contracts axis {axis} of a with axis -2 of x)"
    )
    raises_everywhere(jax_tsmm.mtsm, (f64(*a_shape_), f64(*x_shape)), ValueError, match,
                      transpose_a=transpose_a)


@pytest.mark.parametrize("a_batch, x_batch", [((2,), (3,)), ((4, 1, 2), (3, 3)), ((0,), (2,))])
def test_batch_dimensions_do_not_broadcast(a_batch, x_batch):
    match = re.escape(
        f"jax_tsmm.mtsm: batch dimensions of a {a_batch} and x {x_batch} do not broadcast"
    )
    raises_everywhere(jax_tsmm.mtsm, (f64(*a_batch, 5, 3), f64(*x_batch, 3, 2)), ValueError, match)


@pytest.mark.parametrize(
    "a_dtype, x_dtype",
    [(np.float32, np.float64), (np.complex64, np.float32), (np.complex128, np.complex64),
     (jnp.bfloat16, np.float16)],
)
def test_mismatched_dtypes(a_dtype, x_dtype):
    match = re.escape(
        f"jax_tsmm.mtsm: a and x must have the same dtype, got "
        f"{np.dtype(a_dtype).name} and {np.dtype(x_dtype).name}"
    )
    args = (np.ones((4, 3), a_dtype), np.ones((3, 2), x_dtype))
    raises_everywhere(jax_tsmm.mtsm, args, TypeError, match)


@pytest.mark.parametrize("bad", [np.int32, np.int64, np.uint8, np.bool_], ids=dtype_id)
@pytest.mark.parametrize("which", (0, 1))
def test_unsupported_dtypes(which, bad):
    args = [np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)]
    args[which] = args[which].astype(bad)
    name = "ax"[which]
    match = re.escape(f"jax_tsmm.mtsm: {name} has dtype {np.dtype(bad).name}; expected one of")
    raises_everywhere(jax_tsmm.mtsm, tuple(args), TypeError, match + ".*float32")


@pytest.mark.parametrize(
    "bad, type_name", [([[1.0]], "list"), (None, "NoneType"), (1.5, "float"), ("x", "str")]
)
@pytest.mark.parametrize("which", (0, 1))
def test_non_array_arguments(which, bad, type_name):
    args = [f64(2, 2), f64(2, 2)]
    args[which] = bad
    match = re.escape(
        f"jax_tsmm.mtsm: {'ax'[which]} must be a JAX or NumPy array, got {type_name}"
    )
    with pytest.raises(TypeError, match=match):
        jax_tsmm.mtsm(*args)


@pytest.mark.parametrize("flag", ("transpose_a", "conj"))
@pytest.mark.parametrize("value", [1, 0, None, "yes", np.array(True), jnp.array(True)])
def test_flags_must_be_bool(flag, value):
    a = np.ones((4, 4), np.complex128)
    with pytest.raises(TypeError, match=re.escape(f"jax_tsmm.mtsm: {flag} must be a bool, got")):
        jax_tsmm.mtsm(a, a, **{flag: value})
    with pytest.raises(TypeError, match=f"{flag} must be a bool"):
        jax.jit(jax_tsmm.mtsm)(a, a, **{flag: True})  # traced: not allowed


def test_flags_are_keyword_only():
    a = np.ones((4, 4))
    with pytest.raises(TypeError):
        jax_tsmm.mtsm(a, a, True)


def test_primitive_rejects_unequal_ranks():
    with pytest.raises(ValueError, match="tsmm_mtsm: operands must have equal rank"):
        jax.eval_shape(
            lambda a, x: mtsm_p.bind(a, x, transpose_a=False, conj=False), f64(2, 5, 3), f64(3, 2)
        )


def test_errors_are_raised_at_trace_time():
    a = jax.ShapeDtypeStruct((1000, 300), jnp.float32)
    x = jax.ShapeDtypeStruct((999, 2), jnp.float32)
    with pytest.raises(ValueError, match="contracted dimension K differs"):
        jax.eval_shape(jax_tsmm.mtsm, a, x)
    x = jax.ShapeDtypeStruct((300, 2), jnp.float64)
    with pytest.raises(TypeError, match="same dtype, got float32 and float64"):
        jax.eval_shape(jax_tsmm.mtsm, a, x)


# --- the CUDA kernels: generator and lowering (no GPU needed) --------------------------

KERNEL_DTYPES = ("float32", "float64", "complex64", "complex128")


def kernel_problems():
    return [
        mtsm_codegen.MtsmProblem(transpose_a, dtype, n, conj=conj)
        for transpose_a in (False, True)
        for dtype in KERNEL_DTYPES
        for n in range(1, mtsm_codegen.MAX_N + 1)
        for conj in ((False, True) if is_complex(dtype) else (False,))
    ]


def test_default_configs_are_valid_and_emit():
    for problem in kernel_problems():
        spec = mtsm_codegen.MtsmSpec(problem, mtsm_codegen.default_config(problem))
        mtsm_codegen.validate(spec)
        source = mtsm_codegen.kernel_source(spec)
        assert f"void __launch_bounds__({spec.threads}, {spec.config.blocks_per_sm}) {spec.name}(" in source
        assert f"{spec.name}_finalize(" in source


@pytest.mark.parametrize(
    "config, why",
    [
        (dict(tile_n=4, rows_per_thread=3, lanes=64, chunk_rows=8), "must divide"),
        (dict(tile_n=4, rows_per_thread=4, lanes=48, chunk_rows=8), "multiple of 32"),
        (dict(tile_n=9, rows_per_thread=4, lanes=64, chunk_rows=8), "tile_n"),
        (dict(tile_n=4, rows_per_thread=4, lanes=1024, chunk_rows=8, ), "threads per block"),
        (dict(tile_n=4, rows_per_thread=4, lanes=64, chunk_rows=4096), "shared memory"),
        (dict(tile_n=4, rows_per_thread=4, lanes=64, chunk_rows=8, tf32x3=True), "needs mma"),
        (dict(tile_n=8, rows_per_thread=2, row_warps=4, k_steps=3, mma=True, tf32x3=True), "even k_steps"),
        (dict(tile_n=8, rows_per_thread=1, row_warps=4, k_steps=2, mma=True, tf32x3=True), "rows_per_thread"),
        (dict(tile_n=8, rows_per_thread=2, row_warps=4, k_steps=8, mma=True, wgmma=True), "3xTF32"),
        (dict(tile_n=8, rows_per_thread=2, row_warps=2, k_steps=8, mma=True, tf32x3=True, wgmma=True), "warpgroups"),
        (dict(tile_n=8, rows_per_thread=2, row_warps=4, k_steps=32, mma=True, tf32x3=True, wgmma=True), "16 k-steps"),
        (dict(tile_n=8, rows_per_thread=2, lanes=64, chunk_rows=8, wgmma=True), "needs mma"),
    ],
)
def test_invalid_configs_are_rejected(config, why):
    problem = mtsm_codegen.MtsmProblem(True, "float32", 8)
    spec = mtsm_codegen.MtsmSpec(problem, mtsm_codegen.MtsmConfig(**config))
    with pytest.raises(mtsm_codegen.InvalidSpec, match=why):
        mtsm_codegen.validate(spec)


@pytest.mark.parametrize("transpose_a, dtype, n", [(False, "float64", 1), (True, "float64", 24), (False, "float32", 13),
                                                 (True, "float32", 64), (False, "float64", 64), (False, "float32", 16)])
def test_search_offers_valid_distinct_candidates(transpose_a, dtype, n):
    """The tuner's candidates: the model's default first, then valid configurations
    of other shapes (the tensor cores' among them from N = 16: 3xTF32 for float32,
    DMMA for float64), within the limit; their neighbours are valid and one step away."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, dtype, n)
    found = search.mtsm_candidates(problem, 10)
    assert found[0] == mtsm_codegen.default_config(problem)
    assert len(found) == len(set(found)) == 10
    assert len({(c.mma, c.tile_n, c.rows_per_thread, c.lanes, c.row_warps, c.k_groups) for c in found}) > 3
    if n >= 16:  # where it fills two 8-column blocks
        assert any(c.tf32x3 if dtype == "float32" else c.mma for c in found)
    elif dtype == "float64":
        assert not any(c.mma for c in found)
    assert len(search.mtsm_candidates(problem, 1)) == 1
    for config in found:
        mtsm_codegen.validate(mtsm_codegen.MtsmSpec(problem, config))
        for moved in search.mtsm_neighbours(problem, config):
            mtsm_codegen.validate(mtsm_codegen.MtsmSpec(problem, moved))
            changed = {f for f in dataclasses.asdict(config) if getattr(moved, f) != getattr(config, f)}
            assert changed and changed <= {"stages", "blocks_per_sm", "chunk_rows", "lanes", "k_steps", "row_warps",
                                           "k_groups"}, changed
            # k_groups moves with k_steps (the same bytes per row); blocks per SM fall with
            # a step whose blocks no longer fit as many times
            assert len(changed - {"k_steps", "blocks_per_sm"}) <= 1
            if "blocks_per_sm" in changed and len(changed) > 1:
                assert moved.blocks_per_sm < config.blocks_per_sm
                with pytest.raises(mtsm_codegen.InvalidSpec):
                    mtsm_codegen.validate(mtsm_codegen.MtsmSpec(
                        problem, dataclasses.replace(moved, blocks_per_sm=moved.blocks_per_sm + 1)))


def tuned_specs(arch: str) -> list[mtsm_codegen.MtsmSpec]:
    """Every mtsm kernel the shipped tuning databases of ``arch`` (its own and its GPU
    models') choose."""
    specs = []
    for path in sorted(_dispatch.TUNING_DIR.glob(f"{arch}.*json")):
        for key, entries in json.loads(path.read_text())["entries"].items():
            if key.startswith("mtsm"):
                problem = mtsm_codegen.mtsm_key_problem(key)
                specs += [mtsm_codegen.MtsmSpec(problem, mtsm_codegen.MtsmConfig(**e["config"]))
                          for e in entries if e["config"] is not None]
    return list(dict.fromkeys(specs))


def test_shipped_mtsm_kernels_are_valid():
    """Every mtsm kernel the shipped tuning databases choose is valid as the
    generator stands (a configuration whose code changed is re-timed, not kept)."""
    arches = sorted({path.name.split(".")[0] for path in _dispatch.TUNING_DIR.glob("*.json")})
    specs = [spec for arch in arches for spec in tuned_specs(arch)]
    for spec in specs:
        mtsm_codegen.validate(spec)
    assert specs


def test_wgmma_candidates_are_offered_for_hopper_alone():
    problem = mtsm_codegen.MtsmProblem(False, "float32", 32)
    assert any(c.wgmma for c in search.mtsm_candidates(problem, 64))
    assert not any(c.wgmma for c in search.mtsm_candidates(problem, 64, "sm_80"))


def test_neighbours_double_the_chunk_at_the_blocks_per_sm_that_fit():
    """The 3xTF32 A X kernel of N = 16 at four blocks per SM: its chunk doubled fits
    two blocks per SM, a neighbour the local search would otherwise never reach in
    one step (on an H200, 2026-11-25, 85.5 % of the read roofline -> 90.4 % at
    16384 x 16384)."""
    problem = mtsm_codegen.MtsmProblem(False, "float32", 16)
    start = mtsm_codegen.MtsmConfig(tile_n=16, rows_per_thread=4, row_warps=4, k_steps=8, stages=2, blocks_per_sm=4,
                                    mma=True, tf32x3=True)
    mtsm_codegen.validate(mtsm_codegen.MtsmSpec(problem, start))
    assert dataclasses.replace(start, k_steps=16, blocks_per_sm=2) in search.mtsm_neighbours(problem, start)


@pytest.mark.usefixtures("model_kernels")
def test_splits_fill_the_gpu():
    """K is split only as far as the chunks allow, and the launch's blocks fill the
    SMs' slots: the last wave is nearly full."""
    for transpose_a, dtype, n in [(True, "float32", 1), (False, "float64", 16), (True, "complex128", 8)]:
        spec = mtsm_select(dtype, transpose_a, n, False, 8192)
        slots = 132 * spec.config.blocks_per_sm
        for m, k, batch in [(8192, 8192, 1), (16384, 16384, 1), (30720, 30720, 1), (1000, 777, 1),
                            (64, 10**6, 1), (8192, 8192, 1000)]:
            splits = mtsm_codegen.splits(spec, m, k, batch, 132)
            blocks = -(-m // spec.block_rows) * batch * splits
            assert 1 <= splits <= -(-k // spec.chunk)
            if k >= 8192:
                assert blocks / (-(-blocks // slots) * slots) > 0.95, (m, k, batch, splits)


@pytest.mark.usefixtures("model_kernels")
def test_selection():
    assert mtsm_select("float32", True, 64, False, 8192) is not None
    assert mtsm_select("float64", False, 32, False, 8192) is not None
    assert not mtsm_select("float64", False, 16, False, 8192).config.mma
    assert mtsm_select("float64", False, 64, False, 8192).config.mma  # FMA-bound: DMMA
    assert mtsm_select("float64", True, 24, False, 8192).config.mma
    assert mtsm_select("complex128", True, 32, True, 8192) is None
    assert mtsm_select("float16", True, 8, False, 8192) is None
    assert mtsm_select("float32", True, 65, False, 8192) is None


def test_an_untuned_width_follows_its_tuned_neighbours(monkeypatch, tuned_dispatch):
    """N = 12, untuned, takes a kernel only at a size where the nearest tuned widths,
    8 and 16, both chose kernels, and then 16's configuration with as many groups of
    N's columns; XLA's dot where either chose it; the model's kernel where a side has
    no tuned width, and under model_only."""
    def config(n: int, **changes) -> dict:
        problem = mtsm_codegen.MtsmProblem(False, "float32", n)
        return dataclasses.asdict(dataclasses.replace(mtsm_codegen.default_config(problem), **changes))

    kernel_8, kernel_16 = config(8, stages=2), config(16, tile_n=4, k_groups=2, stages=4)
    entries = {_dispatch.mtsm_key(False, "float32", 8): [{"k_min": 0, "config": None},
                                                         {"k_min": 4096, "config": kernel_8}],
               _dispatch.mtsm_key(False, "float32", 16): [{"k_min": 0, "config": kernel_16},
                                                          {"k_min": 4096, "config": kernel_16}],
               _dispatch.mtsm_key(False, "float32", 1): [{"k_min": 0, "config": None}]}
    monkeypatch.setattr(_dispatch, "_database_file", lambda path: entries if path.name == "sm_90.json" else {})
    model_12 = mtsm_codegen.default_config(mtsm_codegen.MtsmProblem(False, "float32", 12))
    assert mtsm_select("float32", False, 12, False, 1000) is None  # 8 chose XLA, 16 a kernel
    fitted = mtsm_select("float32", False, 12, False, 8192).config
    assert fitted == dataclasses.replace(mtsm_codegen.MtsmConfig(**kernel_16), tile_n=3)  # 4 groups, as 16's
    assert mtsm_select("float32", False, 4, False, 8192) is None  # between 1 and 8
    assert mtsm_select("float32", False, 20, False, 1000).config == mtsm_codegen.default_config(
        mtsm_codegen.MtsmProblem(False, "float32", 20))  # nothing tuned above 16
    assert mtsm_select("float32", True, 12, False, 1000).config == mtsm_codegen.default_config(
        mtsm_codegen.MtsmProblem(True, "float32", 12))  # Aᵀ X: nothing tuned
    with _dispatch.model_only():
        assert mtsm_select("float32", False, 12, False, 1000).config == model_12


def compile_for_sm90(tmp_path, specs) -> tuple[str, dict[str, tuple[int, int]], str]:
    """``specs`` compiled for sm_90 as the package compiles them: the module's source,
    ptxas's registers and spills per entry function, and its whole report."""
    source = tmp_path / "mtsm.cu"
    _, report = _kernels.compile_with_report(specs, "sm_90", source)
    return source.read_text(), _kernels.ptxas_usage(report), report


@pytest.mark.nvcc
@pytest.mark.usefixtures("model_kernels")
@pytest.mark.parametrize(
    "transpose_a, dtype, n, conj",
    [(True, "float32", 1, False), (True, "float64", 13, False), (True, "complex64", 64, True),
     (False, "float32", 64, False), (False, "float64", 3, False), (False, "complex128", 16, True),
     (True, "float64", 64, False), (False, "float64", 40, False)],
)
def test_kernels_compile_without_spills(tmp_path, transpose_a, dtype, n, conj):
    _, usage, report = compile_for_sm90(tmp_path, [mtsm_select(dtype, transpose_a, n, conj, 8192)])
    assert usage and all(spilled == 0 for _, spilled in usage.values()), report
    assert all(line.strip().startswith("0 bytes stack frame") for line in report.splitlines()
               if "stack frame" in line), report


@pytest.mark.nvcc
@pytest.mark.parametrize("transpose_a, n", [(False, 64), (True, 24)])
def test_tf32_candidates_compile_without_spills(tmp_path, transpose_a, n):
    """The 3xTF32 kernels the tuner would time for float32 (the GPU tests run them)."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, "float32", n)
    specs = [mtsm_codegen.MtsmSpec(problem, c) for c in search.mtsm_candidates(problem, 12) if c.tf32x3]
    assert specs
    source, usage, report = compile_for_sm90(tmp_path, specs)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
    assert len(usage) == 2 * len(specs) and all(spilled == 0 for _, spilled in usage.values()), report


@pytest.mark.nvcc
@pytest.mark.parametrize("transpose_a, n", [(False, 32), (True, 64), (False, 13)])
def test_wgmma_candidates_compile_without_spills(tmp_path, transpose_a, n):
    """The wgmma kernels the tuner would time for float32 (for sm_90a; the GPU tests
    run them): each chunk's products as wgmma of the padded width, none on mma.sync."""
    problem = mtsm_codegen.MtsmProblem(transpose_a, "float32", n)
    specs = [mtsm_codegen.MtsmSpec(problem, c) for c in search.mtsm_candidates(problem, 12) if c.wgmma]
    assert specs and all(spec.arch_specific for spec in specs)
    source, usage, report = compile_for_sm90(tmp_path, specs)
    assert f"wgmma.mma_async.sync.aligned.m64n{-(-n // 8) * 8}k8.f32.tf32.tf32" in source
    assert "Potential Performance Loss" not in report  # ptxas would serialize the products in flight
    assert not any("tsmm_mma_tf32(" in mtsm_codegen.kernel_source(spec) for spec in specs)
    assert len(usage) == 2 * len(specs) and all(spilled == 0 for _, spilled in usage.values()), report


def cuda_hlo(fn, *args) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


needs_extension = pytest.mark.skipif(_kernels.extension() is None, reason="package built without CUDA")


@needs_extension
@pytest.mark.nvcc
@pytest.mark.usefixtures("model_kernels")
@pytest.mark.parametrize("transpose_a", (False, True))
def test_cuda_lowering_calls_the_kernels(transpose_a):
    a = jnp.ones((3, 2) + a_shape(transpose_a, 1000, 777), jnp.float32)
    x = jnp.ones((3, 2, 777, 5), jnp.float32)
    f = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a)
    assert "tsmm_mtsm" in cuda_hlo(f, a, x)
    assert "tsmm_mtsm" in cuda_hlo(f, a[:1, :1], x)  # a broadcast whole
    c = jnp.ones(a_shape(transpose_a, 1000, 777), jnp.complex128)
    g = functools.partial(jax_tsmm.mtsm, transpose_a=transpose_a, conj=True)
    assert "tsmm_mtsm" in cuda_hlo(g, c, jnp.ones((777, 3), jnp.complex128))
    # The gradient with respect to x runs the other layout's kernel.
    loss = lambda a, x: jnp.sum(f(a, x) ** 2)
    assert cuda_hlo(jax.grad(loss, 1), a, x).count("custom_call @tsmm_mtsm") == 2


@needs_extension
@pytest.mark.parametrize(
    "a, x",
    [
        (jnp.ones((100, 80), jnp.float16), jnp.ones((80, 4), jnp.float16)),
        (jnp.ones((100, 80), jnp.bfloat16), jnp.ones((80, 4), jnp.bfloat16)),
        (jnp.ones((100, 80)), jnp.ones((80, 65))),
        (jnp.ones((100, 80), jnp.complex128), jnp.ones((80, 64), jnp.complex128)),  # FMA-bound
        (jnp.ones((2, 1, 100, 80)), jnp.ones((1, 3, 80, 4))),  # neither equal nor whole broadcasts
        (jnp.ones((0, 80)), jnp.ones((80, 4))),
        (jnp.ones((100, 0)), jnp.ones((0, 4))),
    ],
    ids=["float16", "bfloat16", "n65", "complex128-n64", "broadcast", "m0", "k0"],
)
def test_cuda_lowering_falls_back_to_xla(a, x):
    hlo = cuda_hlo(jax_tsmm.mtsm, a, x)
    assert "tsmm_mtsm" not in hlo and "dot_general" in hlo


@needs_extension
def test_cuda_lowering_follows_the_tuning_database(monkeypatch):
    """Where the tuner measured XLA faster (by ranges of the call's size, the M = K
    of the square problem with as many elements of A, batch included), mtsm lowers
    to XLA's dot."""
    from jax_tsmm import _dispatch

    key = _dispatch.mtsm_key(False, "float32", 5)
    config = dataclasses.asdict(mtsm_codegen.default_config(mtsm_codegen.MtsmProblem(False, "float32", 5)))
    entries = {key: [{"k_min": 1000, "config": config}, {"k_min": 100_000, "config": None}]}
    monkeypatch.setattr(_dispatch, "database", lambda *_: entries)
    for a_shape, kernel in (((300, 10), True), ((3000, 5000), True), ((100_000, 100_000), False),
                            ((10_000_000, 1000), False), ((1000, 10_000_000), False), ((100, 10_000, 10_000), False),
                            ((99_999, 99_999), True)):
        a = jax.ShapeDtypeStruct(a_shape, jnp.float32)
        x = jax.ShapeDtypeStruct((*a_shape[:-2], a_shape[-1], 5), jnp.float32)
        assert ("tsmm_mtsm" in cuda_hlo(jax_tsmm.mtsm, a, x)) == kernel, a_shape


def test_a_calls_size_is_the_square_with_as_many_elements_of_a():
    assert _mtsm.problem_size(1, 8192, 8192) == 8192
    assert _mtsm.problem_size(1, 1 << 20, 1024) == _mtsm.problem_size(64, 4096, 4096) == 32768
    assert _mtsm.problem_size(1, 1000, 1001) == 1000
