"""The CUDA lowering of the primitives: generated kernels through XLA FFI calls.

Registered for platform "cuda" on the per-shard primitives (``atb_local_p``,
``ab_local_p``, ``ab_update_local_p``; see ``_sharding``), next to their
default lowering; the rules in ``_primitives`` are untouched. Problems no
kernel serves (half precision, empty or very wide shapes, a build without
CUDA) and those where the tuning database says XLA measured faster lower to
XLA's dot. Complex problems may run as their real view (see ``_dispatch``):
the real kernel of twice the widths on the same buffers, with the small C
expanded and the small result combined here.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir
from jaxlib import xla_client

from jax_tsmm import _dispatch, _kernels
from jax_tsmm._primitives import (
    ab_local_p,
    ab_update_local_p,
    ab_update_xla,
    ab_xla,
    atb_local_p,
    atb_xla,
)

DEFAULT_ARCH = "sm_90"
DEFAULT_MULTIPROCESSORS = 132  # an H100 SXM's, for lowering without a GPU


@functools.cache
def register_targets() -> bool:
    ext = _kernels.extension()
    if ext is None:
        warnings.warn(
            "jax_tsmm was built without CUDA (no nvcc at install time): atb and ab use XLA's dot on the GPU",
            stacklevel=3,
        )
        return False
    for name, capsule in ext.registrations().items():
        # Every handler launches the same kernels on caller-owned buffers for given
        # shapes and attributes, so XLA may capture it into a CUDA graph: inside a
        # jitted loop the call then costs no trip back to the host.
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA",
                                    traits=xla_client.CustomCallTargetTraits.COMMAND_BUFFER_COMPATIBLE)
    return True


@functools.cache
def arch() -> str:
    """The local GPU's architecture; sm_90 when lowering without one (e.g. jax.export)."""
    try:
        capability = jax.devices("cuda")[0].compute_capability
    except RuntimeError:
        return DEFAULT_ARCH
    return "sm_" + capability.replace(".", "")


@functools.cache
def device_kind() -> str:
    """The local GPU's model as JAX names it (e.g. "NVIDIA H200"), which picks its
    own tuning database; "" when lowering without one."""
    try:
        return jax.devices("cuda")[0].device_kind
    except RuntimeError:
        return ""


@functools.cache
def multiprocessors() -> int:
    """Streaming multiprocessors of the local GPU, which size the launch grids."""
    try:
        return jax.devices("cuda")[0].core_count
    except RuntimeError:
        return DEFAULT_MULTIPROCESSORS


def grid_k(spec, k: int, batch: int) -> int:
    """Blocks per batch item along K: enough to fill the GPU ``blocks_per_sm`` deep
    ``waves`` times over, but no more than there are chunks of K. Fixed at
    lowering (with atb's partial sums sized to match), so each call launches the
    same work."""
    wanted = math.ceil(multiprocessors() * spec.config.blocks_per_sm * spec.config.waves / batch)
    return max(1, min(wanted, math.ceil(k / spec.rows_per_chunk)))


def expand_complex(c, conj: bool):
    """Complex C (..., M, N) -> the real C' (..., 2M, 2N) for which the real view of
    op(A) times C' is the real view of op(A) C (real views: the last axis doubled,
    real and imaginary parts interleaved). Row 2i of C' meets Re a_i, row 2i+1
    Im a_i, so block (i, j) is [[Re c, Im c], [-Im c, Re c]]; conj(A) negates
    Im a_i, hence the odd rows."""
    re, im = jnp.real(c), jnp.imag(c)
    even = jnp.stack([re, im], axis=-1)
    odd = jnp.stack([-im, re], axis=-1)
    rows = jnp.stack([even, -odd if conj else odd], axis=-3)  # (..., M, 2, N, 2)
    return rows.reshape(*c.shape[:-2], 2 * c.shape[-2], 2 * c.shape[-1])


def combine_complex(r, conj: bool):
    """op(A)ᵀ B (..., M, N) from R (..., 2M, 2N), the real product of the real views
    of A and B: block (i, j) of R holds the sums [[ar br, ar bi], [ai br, ai bi]];
    conj(A) negates ai, hence the odd rows."""
    a_re, a_im = r[..., 0::2, :], r[..., 1::2, :]
    if conj:
        a_im = -a_im
    return lax.complex(a_re[..., 0::2] - a_im[..., 1::2], a_re[..., 1::2] + a_im[..., 0::2])


def _kernel_call(*operands, spec, out_aval, conj, alpha=1, beta=0):
    """The FFI call of ``spec``'s kernel; atb's partial sums and ab's chunk counters
    (empty where the kernel has none) are a second result, ab's update writes into
    y's buffer (XLA copies y first unless it is dead).

    A real spec for complex operands runs on their real view: the handler sees
    each complex buffer as real of twice the width (``real_view``; nothing is
    copied), ab's C goes in expanded (conj and alpha folded in, so the kernel
    adds beta y with a real beta), atb's real result is combined after. Otherwise
    conj is part of the spec."""
    real_view = _dispatch.is_real_view(spec, out_aval.dtype)
    problem = spec.problem
    k = operands[0].shape[-2]
    batch_shape = out_aval.shape[:-2]
    batch = math.prod(batch_shape)
    attrs = dict(
        kernel=spec.name,
        library=_kernels.library_for(spec, arch()),
        threads=np.int32(spec.threads),
        shared_bytes=np.int32(spec.shared_bytes),
        rows_per_chunk=np.int64(spec.rows_per_chunk),
        grid_k=np.int64(grid_k(spec, k, batch)),
        m_panels=np.int32(spec.config.m_panels),
        real_view=real_view,
    )
    if problem.op == "atb":
        # The kernel's problem shapes its results: (M, N), or the real view's (2M, 2N).
        partials = batch * int(attrs["grid_k"]) * problem.m * problem.n if attrs["grid_k"] > 1 else 0
        results = (jax.ShapeDtypeStruct(batch_shape + (problem.m, problem.n), problem.dtype),
                   jax.ShapeDtypeStruct((partials,), problem.dtype))
        out = jax.ffi.ffi_call("tsmm_atb", results)(*operands, **attrs)[0]
        return combine_complex(out, conj) if real_view else out
    if real_view:
        a, c, *y = operands
        operands = (a, expand_complex(c if alpha == 1 else alpha * c, conj), *y)
        alpha = 1
    # Kernels that take their chunks of K (bulk copies, or Config.ring_takes_chunks) take them from a
    # counter per batch item (codegen.abi), zeroed by the handler.
    counters = batch if spec.chunk_slots else 0
    results = (jax.ShapeDtypeStruct(out_aval.shape, out_aval.dtype), jax.ShapeDtypeStruct((counters,), np.uint32))
    if not problem.update:
        return jax.ffi.ffi_call("tsmm_ab", results)(*operands, **attrs)[0]
    alpha, beta = complex(alpha), complex(beta)
    attrs.update(alpha_real=np.float64(alpha.real), alpha_imag=np.float64(alpha.imag),
                 beta_real=np.float64(beta.real), beta_imag=np.float64(beta.imag))
    return jax.ffi.ffi_call("tsmm_ab_update", results, input_output_aliases={2: 0})(*operands, **attrs)[0]


def _lowering(op: str, xla_impl, *, update: bool = False):
    def rule(ctx, *operands, conj, **scales):
        x_aval, y_aval = ctx.avals_in[:2]
        out_aval = ctx.avals_out[0]
        k, m = x_aval.shape[-2:]
        n = y_aval.shape[-1]
        batch_dims = len(out_aval.shape) - 2
        # One value passed as both of atb's operands: a Gram matrix, whose kernel stages it once.
        gram = op == "atb" and operands[0] == operands[1]
        spec = None
        if math.prod(out_aval.shape) > 0:
            # A complex beta is no scale of y's real view: the update then runs natively.
            real_view = complex(scales.get("beta", 0)).imag == 0
            spec = _dispatch.select(op, x_aval.dtype, m, n, k, batch_dims, conj, arch(), device_kind(),
                                    update=update, real_view=real_view, gram=gram)
        if spec is None or not register_targets() or not _kernels.runnable(spec):
            return mlir.lower_fun(xla_impl, multiple_results=False)(ctx, *operands, conj=conj, **scales)
        call = functools.partial(_kernel_call, spec=spec, out_aval=out_aval)
        return mlir.lower_fun(call, multiple_results=False)(ctx, *operands, conj=conj, **scales)

    return rule


def _ab_update_without_y(a, c, y, *, conj, alpha, beta):
    """beta == 0: y is not read, so nothing is updated; the ab kernel and a scale."""
    del y, beta
    prod = ab_local_p.bind(a, c, conj=conj)  # already per shard
    return prod if alpha == 1 else (alpha * prod).astype(prod.dtype)


def _ab_update_lowering(ctx, a, c, y, *, conj, alpha, beta):
    if beta == 0:
        return mlir.lower_fun(_ab_update_without_y, multiple_results=False)(
            ctx, a, c, y, conj=conj, alpha=alpha, beta=beta)
    return _fused_ab_update(ctx, a, c, y, conj=conj, alpha=alpha, beta=beta)


# On the per-shard twins: under SPMD partitioning each device runs its kernel on
# its own shards (see _sharding).
mlir.register_lowering(atb_local_p, _lowering("atb", atb_xla), platform="cuda")
mlir.register_lowering(ab_local_p, _lowering("ab", ab_xla), platform="cuda")
_fused_ab_update = _lowering("ab", ab_update_xla, update=True)
mlir.register_lowering(ab_update_local_p, _ab_update_lowering, platform="cuda")
