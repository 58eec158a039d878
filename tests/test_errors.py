"""Every invalid call raises at trace time, eagerly and under jit, with a message
that names the offending argument, shapes or dtypes."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsmm
from jax_tsmm._primitives import ab_p, atb_p


def f64(*shape):
    return np.ones(shape, np.float64)


def f32(*shape):
    return np.ones(shape, np.float32)


def atb(a, b, **kw):
    return jax_tsmm.atb(a, b, **kw)


def ab(a, c):
    return jax_tsmm.ab(a, c)


def raises_everywhere(fn, args, exc, match, **kwargs):
    """``fn(*args)`` raises eagerly, under jit, under make_jaxpr and eval_shape."""
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    array_args = [a for a in args if isinstance(a, (np.ndarray, jax.Array))]
    if len(array_args) == len(args):  # the tracing forms need array arguments
        f = lambda *xs: fn(*xs, **kwargs)
        with pytest.raises(exc, match=match):
            jax.jit(f)(*args)
        with pytest.raises(exc, match=match):
            jax.make_jaxpr(f)(*args)
        with pytest.raises(exc, match=match):
            jax.eval_shape(f, *args)
        with pytest.raises(exc, match=match):
            jax.jit(jax.vmap(f))(*[x[None] for x in args])


# --- shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, y, name",
    [
        (f64(5), f64(5, 2), "a"),
        (f64(), f64(5, 2), "a"),
        (f64(5, 3), f64(5), "b"),
    ],
)
def test_atb_rank(x, y, name):
    match = re.escape(f"atb: {name} must have rank >= 2, got shape {(x if name == 'a' else y).shape}")
    raises_everywhere(atb, (x, y), ValueError, match)


@pytest.mark.parametrize("x, y, name", [(f64(5), f64(5, 2), "a"), (f64(5, 3), f64(3), "c")])
def test_ab_rank(x, y, name):
    match = re.escape(f"ab: {name} must have rank >= 2, got shape {(x if name == 'a' else y).shape}")
    raises_everywhere(ab, (x, y), ValueError, match)


@pytest.mark.parametrize("x_shape, y_shape", [((5, 3), (4, 2)), ((2, 7, 3), (6, 2)), ((0, 3), (1, 2))])
def test_atb_long_dimension_mismatch(x_shape, y_shape):
    match = re.escape(
        f"atb: long dimension K differs: a has shape {x_shape}, b has shape {y_shape}"
    )
    raises_everywhere(atb, (f64(*x_shape), f64(*y_shape)), ValueError, match)


@pytest.mark.parametrize("x_shape, y_shape", [((5, 3), (4, 2)), ((2, 7, 3), (2, 2)), ((7, 0), (1, 2))])
def test_ab_inner_dimension_mismatch(x_shape, y_shape):
    match = re.escape(
        f"ab: inner dimension M differs: a has shape {x_shape}, c has shape {y_shape}"
    )
    raises_everywhere(ab, (f64(*x_shape), f64(*y_shape)), ValueError, match)


@pytest.mark.parametrize(
    "x_batch, y_batch", [((2,), (3,)), ((2, 3), (3, 2)), ((4, 1, 2), (3, 3)), ((0,), (2,))]
)
@pytest.mark.parametrize("op", ("atb", "ab"))
def test_batch_dimensions_do_not_broadcast(op, x_batch, y_batch):
    x = f64(*x_batch, 5, 3)
    y = f64(*y_batch, 5 if op == "atb" else 3, 2)
    other = "b" if op == "atb" else "c"
    match = re.escape(
        f"{op}: batch dimensions of a {x_batch} and {other} {y_batch} do not broadcast"
    )
    raises_everywhere(atb if op == "atb" else ab, (x, y), ValueError, match)


# --- dtypes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x_dtype, y_dtype",
    [
        (np.float32, np.float64),
        (np.float64, np.float32),
        (np.complex64, np.float32),
        (np.complex128, np.complex64),
        (jnp.bfloat16, np.float32),
        (np.float16, jnp.bfloat16),
    ],
)
@pytest.mark.parametrize("op", ("atb", "ab"))
def test_mismatched_dtypes(op, x_dtype, y_dtype):
    x = np.ones((5, 3), x_dtype)
    y = np.ones((5, 2) if op == "atb" else (3, 2), y_dtype)
    other = "b" if op == "atb" else "c"
    match = re.escape(
        f"{op}: a and {other} must have the same dtype, got "
        f"{np.dtype(x_dtype).name} and {np.dtype(y_dtype).name}"
    )
    raises_everywhere(atb if op == "atb" else ab, (x, y), TypeError, match)


@pytest.mark.parametrize(
    "bad", [np.int32, np.int64, np.int8, np.uint32, np.bool_], ids=lambda d: np.dtype(d).name
)
@pytest.mark.parametrize("which", (0, 1))
@pytest.mark.parametrize("op", ("atb", "ab"))
def test_unsupported_dtypes(op, which, bad):
    shapes = [(5, 3), (5, 2) if op == "atb" else (3, 2)]
    args = [np.ones(shapes[0], np.float32), np.ones(shapes[1], np.float32)]
    args[which] = np.ones(shapes[which], bad)
    name = ["a", "b" if op == "atb" else "c"][which]
    match = re.escape(f"{op}: {name} has dtype {np.dtype(bad).name}; expected one of") + ".*float32"
    raises_everywhere(atb if op == "atb" else ab, tuple(args), TypeError, match)


def test_both_integer_names_the_first():
    with pytest.raises(TypeError, match=re.escape("atb: a has dtype int32")):
        jax_tsmm.atb(np.ones((4, 2), np.int32), np.ones((4, 2), np.int32))


# --- argument types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, type_name",
    [([[1.0, 2.0], [3.0, 4.0]], "list"), (None, "NoneType"), (1.5, "float"), (((1.0,),), "tuple"),
     (3, "int"), ("ab", "str")],
)
@pytest.mark.parametrize("which", (0, 1))
@pytest.mark.parametrize("op", ("atb", "ab"))
def test_non_array_arguments(op, which, bad, type_name):
    args = [f64(2, 2), f64(2, 2)]
    args[which] = bad
    name = ["a", "b" if op == "atb" else "c"][which]
    match = re.escape(f"jax_tsmm.{op}: {name} must be a JAX or NumPy array, got {type_name}")
    with pytest.raises(TypeError, match=match):
        (atb if op == "atb" else ab)(*args)


@pytest.mark.parametrize("conj", [1, 0, None, "yes", 1.0, np.int64(1), np.array(True), jnp.array(True)])
def test_conj_must_be_bool(conj):
    a = np.ones((4, 2), np.complex128)
    with pytest.raises(TypeError, match=re.escape("jax_tsmm.atb: conj must be a bool, got")):
        jax_tsmm.atb(a, a, conj=conj)


def test_conj_is_static_under_jit():
    a = np.ones((4, 2), np.complex128)
    with pytest.raises(TypeError, match="conj must be a bool"):
        jax.jit(jax_tsmm.atb)(a, a, conj=True)  # conj traced: not allowed
    out = jax.jit(jax_tsmm.atb, static_argnames="conj")(a, a, conj=True)
    assert out.shape == (2, 2)


def test_conj_is_keyword_only():
    a = np.ones((4, 2), np.complex128)
    with pytest.raises(TypeError):
        jax_tsmm.atb(a, a, True)


def test_primitives_reject_unequal_ranks():
    """The primitives expect the public functions to equalize the batch rank."""
    with pytest.raises(ValueError, match="equal rank"):
        jax.eval_shape(lambda a, b: atb_p.bind(a, b, conj=False), f64(2, 5, 3), f64(5, 2))
    with pytest.raises(ValueError, match="equal rank"):
        jax.eval_shape(lambda a, c: ab_p.bind(a, c, conj=False), f64(2, 5, 3), f64(3, 2))


def test_errors_are_raised_before_any_computation():
    """Trace-time errors: make_jaxpr raises on abstract shapes alone."""
    a = jax.ShapeDtypeStruct((1000, 3), jnp.float32)
    b = jax.ShapeDtypeStruct((999, 2), jnp.float32)
    with pytest.raises(ValueError, match="long dimension K differs"):
        jax.eval_shape(jax_tsmm.atb, a, b)
    c = jax.ShapeDtypeStruct((3, 2), jnp.float64)
    with pytest.raises(TypeError, match="same dtype, got float32 and float64"):
        jax.eval_shape(jax_tsmm.ab, a, c)
