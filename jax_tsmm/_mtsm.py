"""``mtsm``: a large dense matrix times a tall & skinny block (issue 7).

``mtsm_p``: a (*batch, M, K), x (*batch, K, N) -> (*batch, M, N) = op(a) x
            (``transpose_a=False``)
            a (*batch, K, M), x (*batch, K, N) -> (*batch, M, N) = op(a)ᵀ x
            (``transpose_a=True``; aᵀ is never materialized)

where op is the complex conjugate when ``conj=True`` and the identity
otherwise. A is large and dense (M and K both long), X has few columns (N from
1 to 64 is the intended range; wider X is accepted and computed the same way).
As for ``atb_p``/``ab_p`` the operands of one call have batch shapes of equal
rank whose dimensions are equal or 1; the public ``mtsm`` brings user input into
that form.

Rules: the JVP is bilinear (``ad.defbilinear``). The cotangent of x is
``mtsm(a, ct, transpose_a=not transpose_a)`` (the same primitive, A read the
other way round); the cotangent of a is the rank-N outer product ct xᵀ
(``transpose_a=False``) or x ctᵀ (``transpose_a=True``), conjugated when
``conj``, through XLA's dot. Both are summed over the batch axes their primal
broadcast along.

Lowering: XLA's dot at HIGHEST precision (float32 accumulation for bfloat16 and
float16), registered for every platform. On CUDA, problems a generated kernel
serves (``select``) lower to the FFI call ``tsmm_mtsm`` (kernels from
codegen/mtsm.py, compiled at lowering time); the rest to XLA's dot. Unlike
atb/ab it does not go through ``jax_tsmm._sharding``: on several devices
(outside a fully manual shard_map) it lowers to XLA's dot, which XLA's SPMD
partitioner partitions itself.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from jax_tsmm import _cuda, _dispatch, _kernels
from jax_tsmm._api import _as_array, _check_conj, _with_batch_rank
from jax_tsmm.codegen import mtsm as mtsm_codegen
from jax_tsmm._primitives import (
    _batch_to_front,
    _batched_dot,
    _broadcast_batches,
    _eager_impl,
    _maybe_conj,
    _sum_to_batch,
    broadcast_batch,
    check_dtypes,
)

mtsm_p = Primitive("tsmm_mtsm")


# --- validation (shared by the public function and abstract evaluation) ------


def check_mtsm_shapes(a_shape, x_shape, transpose_a: bool) -> tuple:
    """Rank >= 2 for both; a's contracted axis (-2 with transpose_a, else -1)
    matches x's axis -2; the batch shapes broadcast. Returns the batch shape."""
    for arg, shape in (("a", a_shape), ("x", x_shape)):
        if len(shape) < 2:
            raise ValueError(
                f"jax_tsmm.mtsm: {arg} must have rank >= 2, got shape {tuple(shape)}"
            )
    a_k = a_shape[-2] if transpose_a else a_shape[-1]
    if a_k != x_shape[-2]:
        axis = "-2" if transpose_a else "-1"
        raise ValueError(
            f"jax_tsmm.mtsm: contracted dimension K differs: a has shape {tuple(a_shape)}, "
            f"x has shape {tuple(x_shape)} (transpose_a={transpose_a} contracts axis {axis} "
            "of a with axis -2 of x)"
        )
    return broadcast_batch("mtsm", "a", a_shape[:-2], "x", x_shape[:-2])


def _check_flag(name: str, arg_name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"jax_tsmm.{name}: {arg_name} must be a bool, got {value!r}")
    return bool(value)


# --- rules ---------------------------------------------------------------------


def _mtsm_abstract_eval(a, x, *, transpose_a, conj):
    check_dtypes("mtsm", "a", a.dtype, "x", x.dtype)
    batch = check_mtsm_shapes(a.shape, x.shape, transpose_a)
    if len(a.shape) != len(x.shape):
        raise ValueError("tsmm_mtsm: operands must have equal rank")
    m = a.shape[-1] if transpose_a else a.shape[-2]
    return jax.core.ShapedArray(batch + (m, x.shape[-1]), a.dtype)


def mtsm_xla(a, x, *, transpose_a, conj):
    """op(a) x or op(a)ᵀ x through XLA's dot at HIGHEST precision (float32
    accumulation for the half dtypes): the lowering on every platform, and on
    CUDA for the problems no kernel serves."""
    a, x = _broadcast_batches(a, x)
    contract_a = a.ndim - 2 if transpose_a else a.ndim - 1
    return _batched_dot(_maybe_conj(a, conj), x, contract_a, x.ndim - 2)


def _mtsm_batch(args, dims, *, transpose_a, conj):
    """vmap: the mapped axis becomes a leading batch axis (size 1 if unmapped)."""
    a, x = (_batch_to_front(v, d) for v, d in zip(args, dims))
    return mtsm_p.bind(a, x, transpose_a=transpose_a, conj=conj), 0


def _outer_dot(u, v):
    """u vᵀ over the last axis of both (the rank-N outer product), batched and
    broadcast over the leading axes, through XLA's dot at HIGHEST precision."""
    u, v = _broadcast_batches(u, v)
    return _batched_dot(u, v, u.ndim - 1, v.ndim - 1)


def _mtsm_transpose_a(ct, a, x, *, transpose_a, conj):
    # out = op(a) x: ct_a = ct xᵀ; out = op(a)ᵀ x: ct_a = x ctᵀ; conjugated
    # when op is conj (the transpose of conj is conj).
    ct_a = _outer_dot(x, ct) if transpose_a else _outer_dot(ct, x)
    return _sum_to_batch(_maybe_conj(ct_a, conj), a.aval.shape[:-2])


def _mtsm_transpose_x(ct, a, x, *, transpose_a, conj):
    ct_x = mtsm_p.bind(a, ct, transpose_a=not transpose_a, conj=conj)
    return _sum_to_batch(ct_x, x.aval.shape[:-2])


mtsm_p.def_impl(_eager_impl(mtsm_p, ("transpose_a", "conj")))
mtsm_p.def_abstract_eval(_mtsm_abstract_eval)
batching.primitive_batchers[mtsm_p] = _mtsm_batch
ad.defbilinear(mtsm_p, _mtsm_transpose_a, _mtsm_transpose_x)
mlir.register_lowering(mtsm_p, mlir.lower_fun(mtsm_xla, multiple_results=False))


# --- the CUDA lowering: generated kernels ----------------------------------------

KERNEL_DTYPES = ("float32", "float64", "complex64", "complex128")
MAX_BATCH = 65535  # gridDim.z


def fma_bound(problem: mtsm_codegen.MtsmProblem) -> bool:
    """Whether the FMA units cannot keep up with one read of A at full bandwidth."""
    return mtsm_codegen.fma_utilization(problem) > 1


def select(dtype, transpose_a: bool, n: int, conj: bool, size: int, arch: str = "sm_90",
           device: str = "") -> mtsm_codegen.MtsmSpec | None:
    """The kernel for this problem, or None for XLA's dot: half precision, N
    outside 1..MAX_N, where the tuning database says XLA measured faster (by
    ranges of ``size``, the M = K of the square problem the tuner timed; a call's
    is ``problem_size``), and complex128 widths that would bind the
    FMA units (XLA's ZGEMM runs on the FP64 tensor cores there, as the float64
    and float32 kernels do; XLA's complex64 has no such path at HIGHEST
    precision). An untuned N follows the tuned widths nearest it (``_untuned_width``);
    a forced spec (the tuner's) serves its problem."""
    return choose(dtype, transpose_a, n, conj, size, arch, device).spec


def choose(dtype, transpose_a: bool, n: int, conj: bool, size: int, arch: str = "sm_90",
           device: str = "") -> _dispatch.Choice:
    """``select``'s choice, with the reason for it."""
    dtype = np.dtype(dtype).name
    if dtype not in KERNEL_DTYPES:
        return _dispatch.Choice(None, f"no kernels for {dtype}")
    if not 1 <= n <= mtsm_codegen.MAX_N:
        return _dispatch.Choice(None, f"no kernels for N outside 1..{mtsm_codegen.MAX_N}")
    problem = mtsm_codegen.MtsmProblem(transpose_a, dtype, n, conj=conj)
    spec = _dispatch.forced_spec(problem)
    if spec is not None:
        return _dispatch.Choice(spec, "forced (_dispatch.forced)")
    entry = _dispatch.tuned(_dispatch.mtsm_key(transpose_a, dtype, n), size, arch, device)
    if entry is not None:
        config = entry["config"]
        spec = None if config is None else mtsm_codegen.MtsmSpec(problem, mtsm_codegen.MtsmConfig(**config))
        return _dispatch.Choice(spec, f"the database: {_dispatch.describe_entry(entry, 'M = K')}")
    if dtype == "complex128" and fma_bound(problem):
        return _dispatch.Choice(None, "complex128 at this N would bind the FMA units; XLA's ZGEMM runs on the "
                                      "FP64 tensor cores")
    return _untuned_width(problem, size, arch, device)


def _untuned_width(problem: mtsm_codegen.MtsmProblem, size: int, arch: str, device: str) -> _dispatch.Choice:
    """An untuned N between tuned widths (12 between 8 and 16) takes a kernel only
    where both chose kernels at ``size``, and then the wider one's configuration
    fitted to N (``fitted``; the model's where that is invalid). Its own kernel
    was timed nowhere. On an H100 (2026-11-27; N = 3..56 at M = K = 2048, 8192 and
    16384, 128 problems) the model's kernel ran below 0.98x XLA at 61 of the 77
    problems where a neighbour had chosen XLA; where both had chosen kernels, at
    0.38-1.95x, and the fitted configurations at 1.10-1.99x. A side without a tuned
    width leaves the model's kernel."""
    model = mtsm_codegen.MtsmSpec(problem, mtsm_codegen.default_config(problem))
    neighbours = tuned_neighbours(problem, size, arch, device)
    widths = " and ".join(str(width) for width, _ in neighbours)
    if len(neighbours) < 2:
        return _dispatch.Choice(model, "no entry serves it, nor a tuned width on both sides: the generator's model")
    if any(config is None for _, config in neighbours):
        return _dispatch.Choice(None, f"no entry serves it; of the tuned widths beside it ({widths}), one chose "
                                      "XLA's dot at this size (_untuned_width)")
    fit = fitted(problem, *neighbours[1])
    if fit is None:
        return _dispatch.Choice(model, f"no entry serves it; the tuned widths beside it ({widths}) chose kernels, "
                                       "the wider one's does not fit N: the generator's model")
    return _dispatch.Choice(fit, f"no entry serves it; the tuned widths beside it ({widths}) chose kernels: "
                                 f"the wider one's, fitted to N (_untuned_width)")


def tuned_neighbours(problem: mtsm_codegen.MtsmProblem, size: int, arch: str,
                     device: str) -> list[tuple[int, mtsm_codegen.MtsmConfig | None]]:
    """The tuned widths nearest N below and above it (a side without one left
    out), each with the configuration it chose at ``size`` (None: XLA's dot)."""
    def key(width: int) -> str:
        return _dispatch.mtsm_key(problem.transpose_a, problem.dtype, width)

    database = _dispatch.database(arch, device)
    widths = [width for width in range(1, mtsm_codegen.MAX_N + 1) if key(width) in database]
    nearest = [max((w for w in widths if w < problem.n), default=None),
               min((w for w in widths if w > problem.n), default=None)]
    found = []
    for width in (w for w in nearest if w is not None):
        config = _dispatch.tuned(key(width), size, arch, device)["config"]
        found.append((width, None if config is None else mtsm_codegen.MtsmConfig(**config)))
    return found


def fitted(problem: mtsm_codegen.MtsmProblem, width: int,
           config: mtsm_codegen.MtsmConfig) -> mtsm_codegen.MtsmSpec | None:
    """``config``, tuned for N = ``width``, with N's columns split into as many
    groups as it split ``width``'s (tile_n = N on the tensor cores), where valid:
    the thread layout the tuner chose, with register tiles fitted to N."""
    groups = -(-width // config.tile_n)
    tile_n = problem.n if config.mma else -(-problem.n // groups)
    spec = mtsm_codegen.MtsmSpec(problem, dataclasses.replace(config, tile_n=tile_n))
    try:
        mtsm_codegen.validate(spec)
    except mtsm_codegen.InvalidSpec:
        return None
    return spec


def problem_size(batch: int, m: int, k: int) -> int:
    """The M = K of the square problem with as many elements of A as this call's,
    batch items included (one launch serves them all): the tuner times each
    range at one square size, and what sets a call's best kernel, and whether
    XLA's dot beats it, is mostly how much of A it streams. By K alone, an
    A of 10^6 x 1024 would take the choice timed at 1024 x 1024, where fixed
    costs rule and XLA's dot won most problems (H100, 2026-11-27)."""
    return math.isqrt(batch * m * k)


def _kernel_batch(operand_batch, out_batch) -> bool:
    """The kernels step through an operand's batch with one stride: its batch
    shape equals out's or is all ones."""
    return tuple(operand_batch) == tuple(out_batch) or all(d == 1 for d in operand_batch)


def _per_device(ctx) -> bool:
    """Whether this lowering runs whole on each device: one device, or a shard_map
    that is manual over every mesh axis. Elsewhere XLA's SPMD partitioner would
    replicate a custom call's operands, while it partitions XLA's dot."""
    context = ctx.module_context.axis_context
    if hasattr(context, "manual_axes"):
        return set(context.manual_axes) == set(context.mesh.axis_names)
    return getattr(context, "num_devices", 1) == 1


def _mtsm_cuda_lowering(ctx, a, x, *, transpose_a, conj):
    a_aval, x_aval = ctx.avals_in
    out_aval = ctx.avals_out[0]
    m, n = out_aval.shape[-2:]
    k = x_aval.shape[-2]
    out_batch = out_aval.shape[:-2]
    batch = math.prod(out_batch)
    spec = None
    if (m * n * batch * k > 0 and batch <= MAX_BATCH and _per_device(ctx)
            and _kernel_batch(a_aval.shape[:-2], out_batch)
            and _kernel_batch(x_aval.shape[:-2], out_batch)):
        spec = select(a_aval.dtype, transpose_a, n, conj, problem_size(batch, m, k), _cuda.arch(),
                      _cuda.device_kind())
    if spec is None or not _cuda.register_targets() or not _kernels.runnable(spec):
        return mlir.lower_fun(mtsm_xla, multiple_results=False)(ctx, a, x, transpose_a=transpose_a, conj=conj)
    splits = mtsm_codegen.splits(spec, m, k, batch, _cuda.multiprocessors())
    partials = splits * batch * m * n if splits > 1 else 0
    call = jax.ffi.ffi_call(
        "tsmm_mtsm",
        (jax.ShapeDtypeStruct(out_aval.shape, out_aval.dtype), jax.ShapeDtypeStruct((partials,), out_aval.dtype)),
    )

    def kernel(a, x):
        out, _ = call(
            a, x,
            kernel=spec.name,
            library=_kernels.library_for(spec, _cuda.arch()),
            threads=np.int32(spec.threads),
            shared_bytes=np.int32(spec.shared_bytes),
            block_rows=np.int64(spec.block_rows),
            chunk=np.int64(spec.chunk),
            splits=np.int64(splits),
            transpose_a=transpose_a,
        )
        return out

    return mlir.lower_fun(kernel, multiple_results=False)(ctx, a, x)


mlir.register_lowering(mtsm_p, _mtsm_cuda_lowering, platform="cuda")


# --- the public function -------------------------------------------------------


def mtsm(a, x, *, transpose_a: bool = False, conj: bool = False):
    """A X (Aᵀ X with ``transpose_a=True``) for a large dense A and a tall &
    skinny X (..., K, N), N from 1 to 64 or so.

    * ``transpose_a=False``: A (..., M, K) -> (..., M, N).
    * ``transpose_a=True``: A (..., K, M) -> Aᵀ X, (..., M, N); Aᵀ is never
      materialized.
    * ``conj=True`` uses conj(A) in place of A (Aᴴ X with ``transpose_a=True``);
      it has no effect on real operands.

    Leading batch axes broadcast like ``jnp.matmul``. Same dtypes as ``atb``;
    bfloat16 and float16 accumulate in float32. On the GPU, generated CUDA
    kernels compute it where one applies (else XLA's dot, as on other backends).
    """
    transpose_a = _check_flag("mtsm", "transpose_a", transpose_a)
    conj = _check_conj("mtsm", conj)
    a = _as_array("mtsm", "a", a)
    x = _as_array("mtsm", "x", x)
    check_dtypes("mtsm", "a", a.dtype, "x", x.dtype)
    rank = len(check_mtsm_shapes(a.shape, x.shape, transpose_a))
    a, x = _with_batch_rank(a, rank), _with_batch_rank(x, rank)
    return mtsm_p.bind(a, x, transpose_a=transpose_a, conj=conj and jnp.iscomplexobj(a))
