"""SPMD partitioning of the primitives: each device computes on its own shards.

A primitive ``p`` (``atb_p``, ``ab_p``) is paired with a per-shard primitive
``p_local`` that has the same parameters and abstract evaluation and carries the
platform lowerings (XLA's dot by default, the CUDA kernels in ``_cuda``). The
lowering of ``p`` on every platform is :func:`partitioned_lowering`: a
``custom_partitioning`` function whose body binds ``p_local``.

* On one device, and inside a ``shard_map`` that is manual over every mesh axis,
  ``custom_partitioning`` inlines that body: the program is exactly ``p_local``'s
  lowering, as if there were no partitioning.
* On several devices XLA's SPMD partitioner (under Shardy or GSPMD) calls the
  ``partition`` callback with the operands' shardings. It keeps the sharding of the
  batch axes and of the factors a :class:`Rule` lists as ``sharded`` (the long
  axis K) and replicates every other axis, so the partitioner reshards any other
  layout to that one. Each device then runs ``p_local`` on its shards; a sharded
  factor the result does not have (K of atb) is summed over its mesh axes with
  one ``psum`` of the small result.

A new primitive joins with a :class:`Rule` and a local twin: see
``_primitives._register``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math

import jax
from jax import lax
from jax._src import dispatch  # prim_requires_devices_during_lowering: no public home
from jax._src.sharding_impls import GSPMDSharding
from jax.experimental.custom_partitioning import (
    ArrayMapping,
    SdyShardingRule,
    custom_partitioning,
)
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec


# Each call lowered in place, not as a function cached by its operands' types, which
# would lower atb(v, v) as atb(v, w): in place, a value passed twice reaches the local
# lowering as one (a Gram matrix, which ``_cuda`` runs by a kernel that stages it
# once). Where register_lowering lacks the flag, such calls run as two operands.
UNCACHED = {"cacheable": False} if "cacheable" in inspect.signature(mlir.register_lowering).parameters else {}


@dataclasses.dataclass(frozen=True)
class Rule:
    """Einsum-like factors of a primitive's trailing axes.

    ``operands`` names each operand's trailing (non-batch) axes, e.g.
    ``("k m", "k n")``; ``result`` the result's, e.g. ``"m n"``. Operands of
    higher rank have that many leading batch axes, shared with the result (an
    axis of size 1 broadcasts). ``sharded`` lists the factors besides the batch
    axes that may stay sharded; a sharded factor missing from ``result`` is
    summed over its mesh axes after the local computation."""

    operands: tuple[str, ...]
    result: str
    sharded: tuple[str, ...]


def _factors(rule: Rule, shapes, out_shape):
    """Factor names per axis of each operand and of the result, and each factor's size.

    Batch axis i is factor ``b{i}``; where an operand broadcasts it (size 1 for a
    larger result axis) that axis gets a factor of its own, ``u{j}_{i}``."""
    out_names = rule.result.split()
    n_batch = len(out_shape) - len(out_names)
    batch = [f"b{i}" for i in range(n_batch)]
    operands = []
    for j, (labels, shape) in enumerate(zip(rule.operands, shapes)):
        names = labels.split()
        lead = len(shape) - len(names)
        assert lead in (0, n_batch), (rule, shapes)
        own = [
            f"u{j}_{i}" if shape[i] == 1 and out_shape[i] != 1 else batch[i]
            for i in range(lead)
        ]
        operands.append(own + names)
    sizes = {}
    for names, shape in zip(operands + [batch + out_names], list(shapes) + [out_shape]):
        for name, size in zip(names, shape):
            sizes[name] = max(size, sizes.get(name, 1))
    return operands, batch + out_names, batch, sizes


def _axes(entry) -> tuple:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def _spec(names, assignment) -> PartitionSpec:
    def entry(name):
        axes = assignment.get(name, ())
        return None if not axes else axes[0] if len(axes) == 1 else axes

    return PartitionSpec(*(entry(name) for name in names))


def _assign(rule: Rule, mesh, arg_shapes, out_shape):
    """The mesh axes each factor is sharded along: the batch and ``sharded``
    factors take the first operand's sharding of them (each mesh axis used once,
    evenly divisible sizes only); every other factor is replicated."""
    shapes = [s.shape for s in arg_shapes]
    operands, result, batch, sizes = _factors(rule, shapes, out_shape)
    specs = []
    for s in arg_shapes:
        sharding = s.sharding
        spec = sharding.spec if isinstance(sharding, NamedSharding) else ()
        specs.append(tuple(spec) + (None,) * (len(s.shape) - len(spec)))
    assignment, used = {}, set()

    def take(factor, axes) -> bool:
        if not axes or used & set(axes) or sizes[factor] % math.prod(mesh.shape[a] for a in axes):
            return False
        assignment[factor] = axes
        used.update(axes)
        return True

    kept = batch + list(rule.sharded)
    for factor in kept:
        any(take(factor, _axes(spec[names.index(factor)]))
            for names, spec in zip(operands, specs) if factor in names)
    # A tall operand sharded along a replicated factor (M, N) stays distributed:
    # those mesh axes move to K (an all-to-all rather than an all-gather).
    for factor in rule.sharded:
        if factor not in assignment:
            any(take(factor, _axes(entry))
                for names, spec in zip(operands, specs) if factor in names
                for name, entry in zip(names, spec) if name not in kept)
    return operands, result, assignment


def _named(mesh, names, assignment):
    return NamedSharding(mesh, _spec(names, assignment))


def _can_decode(mesh, arg_shapes) -> bool:
    return not mesh.empty and all(isinstance(s.sharding, NamedSharding) for s in arg_shapes)


def _unsharded(aval):
    return jax.core.ShapedArray(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _manual_axes(ctx) -> tuple[set, set]:
    """(the mesh axes a shard_map around the call is manual over, all the mesh's axes);
    outside any shard_map, none."""
    context = ctx.module_context.axis_context
    manual = set(getattr(context, "manual_axes", frozenset()))
    return manual, set(context.mesh.axis_names) if manual else set()


def _partially_manual(ctx) -> bool:
    """Inside a shard_map that is manual over some but not all mesh axes."""
    manual, axes = _manual_axes(ctx)
    return bool(manual) and manual != axes


def _one_program(ctx) -> bool:
    """Whether every device runs the program as lowered: one device, or a shard_map
    manual over every mesh axis."""
    if getattr(ctx.module_context.axis_context, "num_devices", None) == 1:
        return True
    manual, axes = _manual_axes(ctx)
    return bool(manual) and manual == axes


def _distinct_operands(local_prim, params: dict, args: tuple):
    """(the distinct values among ``args``, ``local_prim`` bound on ``args`` as a
    function of them): its lowering then sees a value passed twice as one (atb's
    Gram matrix, ``_cuda``)."""
    distinct = list(dict.fromkeys(args))
    order = [distinct.index(arg) for arg in args]
    return distinct, lambda *values: local_prim.bind(*(values[i] for i in order), **params)


def partitioned_lowering(local_prim, rule: Rule):
    """The lowering rule of a primitive whose per-shard computation is ``local_prim``."""

    def body(params, *args):
        return local_prim.bind(*args, **dict(params))

    def partition(params, mesh, arg_shapes, result_shape):
        if not _can_decode(mesh, arg_shapes):
            # No mesh to name the shardings by (shardings that are no
            # NamedSharding): every device computes the whole, replicated.
            replicated = GSPMDSharding.get_replicated(arg_shapes[0].sharding._device_assignment)
            return mesh, functools.partial(body, params), replicated, (replicated,) * len(arg_shapes)
        operands, result, assignment = _assign(rule, mesh, arg_shapes, result_shape.shape)
        reduce_axes = tuple(
            a for f, axes in assignment.items() if f not in result for a in axes
        )

        def lower_fn(*args):
            out = body(params, *args)
            return lax.psum(out, reduce_axes) if reduce_axes else out

        arg_shardings = tuple(_named(mesh, names, assignment) for names in operands)
        return mesh, lower_fn, _named(mesh, result, assignment), arg_shardings

    def infer_sharding_from_operands(params, mesh, arg_shapes, result_shape):
        if not _can_decode(mesh, arg_shapes):
            return arg_shapes[0].sharding  # partition() computes replicated
        _, result, assignment = _assign(rule, mesh, arg_shapes, result_shape.shape)
        return _named(mesh, result, assignment)

    def sharding_rule(params, mesh, operand_types, result_types):
        shapes = [tuple(t.shape) for t in operand_types]
        operands, result, batch, _ = _factors(rule, shapes, tuple(result_types[0].shape))
        # Special factors in order of first appearance (Shardy wants them sorted).
        factors = list(dict.fromkeys(name for names in operands + [result] for name in names))
        return SdyShardingRule(
            tuple(ArrayMapping(*names) for names in operands),
            (ArrayMapping(*result),),
            reduction_factors=tuple(f for f in factors if f in rule.sharded and f not in result),
            # The other non-batch factors; a broadcast axis's own factor has size 1.
            need_replication_factors=tuple(
                f for f in factors if f not in batch and f not in rule.sharded and f[0] != "u"
            ),
        )

    partitioned = custom_partitioning(body, static_argnums=(0,))
    partitioned.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer_sharding_from_operands,
        sharding_rule=sharding_rule,
    )

    def lowering(ctx, *args, **params):
        # Shapes alone from here: the per-shard code traces jnp on unsharded
        # types (under an explicit-axes mesh the avals carry their shardings).
        ctx = ctx.replace(
            avals_in=[_unsharded(a) for a in ctx.avals_in],
            avals_out=[_unsharded(a) for a in ctx.avals_out],
        )
        if _one_program(ctx):
            # What custom_partitioning would inline: the local computation, each
            # operand passed once.
            distinct, fn = _distinct_operands(local_prim, params, args)
            avals = [ctx.avals_in[args.index(value)] for value in distinct]
            return mlir.lower_fun(fn, multiple_results=False)(ctx.replace(avals_in=avals), *distinct)
        if not getattr(jax.config, "jax_use_shardy_partitioner", True) and _partially_manual(ctx):
            # GSPMD cannot hand such shardings to custom_partitioning's
            # callbacks (it aborts): lower the local computation as is.
            fn = functools.partial(local_prim.bind, **params)
        else:
            fn = functools.partial(partitioned, tuple(sorted(params.items())))
        return mlir.lower_fun(fn, multiple_results=False)(ctx, *args)

    return lowering


def register(prim, local_prim, rule: Rule) -> None:
    """Lower ``prim`` on every platform through ``local_prim`` on each shard."""
    mlir.register_lowering(prim, partitioned_lowering(local_prim, rule), **UNCACHED)
    # custom_partitioning needs the device assignment while lowering.
    dispatch.prim_requires_devices_during_lowering.add(prim)
    dispatch.prim_requires_devices_during_lowering.add(local_prim)
