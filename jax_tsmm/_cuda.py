"""The CUDA lowering of both primitives: generated kernels through an XLA FFI call.

Registered for platform "cuda" on the per-shard primitives (``atb_local_p``,
``ab_local_p``; see ``_sharding``), next to their default lowering; the rules in
``_primitives`` are untouched. Problems no kernel serves (half precision, empty
or very wide shapes, a build without CUDA) lower to XLA's dot.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import numpy as np
from jax.interpreters import mlir

from jax_tsmm import _dispatch, _kernels
from jax_tsmm._primitives import ab_local_p, ab_update_local_p, ab_xla, atb_local_p, atb_xla

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
        jax.ffi.register_ffi_target(name, capsule, platform="CUDA")
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
def multiprocessors() -> int:
    """Streaming multiprocessors of the local GPU, which size the launch grids."""
    try:
        return jax.devices("cuda")[0].core_count
    except RuntimeError:
        return DEFAULT_MULTIPROCESSORS


def _lowering(op: str, target: str, xla_impl):
    def rule(ctx, x, y, *, conj):
        x_aval, y_aval = ctx.avals_in
        out_aval = ctx.avals_out[0]
        k, m = x_aval.shape[-2:]
        n = y_aval.shape[-1]
        batch = out_aval.shape[:-2]
        spec = None
        if math.prod(out_aval.shape) > 0:
            spec = _dispatch.select(op, x_aval.dtype, m, n, k, len(batch), conj, arch())
        if spec is None or not register_targets():
            return mlir.lower_fun(xla_impl, multiple_results=False)(ctx, x, y, conj=conj)
        return jax.ffi.ffi_lowering(target)(
            ctx, x, y,
            kernel=spec.name,
            library=_kernels.library_for(spec, arch()),
            threads=np.int32(spec.threads),
            shared_bytes=np.int32(spec.shared_bytes),
            rows_per_chunk=np.int64(spec.rows_per_chunk),
            blocks_per_sm=np.int32(spec.config.blocks_per_sm),
            m_panels=np.int32(spec.config.m_panels),
        )

    return rule


# On the per-shard twins: under SPMD partitioning each device runs its kernel on
# its own shards (see _sharding).
mlir.register_lowering(atb_local_p, _lowering("atb", "tsmm_atb", atb_xla), platform="cuda")
mlir.register_lowering(ab_local_p, _lowering("ab", "tsmm_ab", ab_xla), platform="cuda")


# --- ab_update: beta * y + alpha * op(a) c ---------------------------------------
# For now the ab kernel followed by XLA's elementwise update: one more read of
# the (K, N) product and of y than a fused one-pass kernel would need (open).


def _ab_update_via_ab(a, c, y, *, conj, alpha, beta):
    prod = ab_local_p.bind(a, c, conj=conj)  # already per shard
    if alpha != 1:
        prod = alpha * prod
    if beta != 0:
        prod = prod + (y if beta == 1 else beta * y)
    return prod.astype(y.dtype)


mlir.register_lowering(
    ab_update_local_p, mlir.lower_fun(_ab_update_via_ab, multiple_results=False), platform="cuda"
)
