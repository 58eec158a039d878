"""jax_tsmm against XLA's dot on this GPU, as a percentage of the memory/compute roofline.

    python -m jax_tsmm.bench [--dtypes float64,float32] [--ops atb,ab,ab_update,gram,mtsm]
                             [--widths 1-64 | --no-squares] [--pairs 1x8,13x48 | --no-pairs]
                             [--k-sweep [--k-sweep-widths 8] [--k-sweep-k K,...]]
                             [--model]
                             [--json out.json] [--plot out.png]
    python -m jax_tsmm.bench --summary out.json [...]

First measures this GPU's ceilings (read-only and copy bandwidth with the
package's own streaming kernels; FP64/FP32 peak with a large XLA matmul), then
times every shape for both libraries in one run and prints, for each, the time
per call, the bandwidth (``moved_bytes``, the bytes a call moves at the least,
over that time) and the % of roofline. Each call streams tall
matrices of at least 1 GiB (far larger than L2; at most 8 GiB, so the narrower
is smaller where the widths are more than 8 apart), rotating between two input
sets (more for smaller operands: ``set_count``); times are medians of several
loops timed inside one jitted function, jax_tsmm's and XLA's in alternating turns.
``ab_update`` is the fused V - Q C (``ab(q, c, out=v, alpha=-1, beta=1)``)
against ``v - q @ c``; ``gram`` the Gram matrix ``atb(a, a)`` (Aᴴ A for complex
dtypes) against ``conj(a).T @ a``, at M = N only, as % of the read-once
roofline. Each row names the kernel configuration it timed (None:
dispatch chose XLA's dot; with ``real_view`` that of the real kernel a complex
problem ran as, see ``_dispatch``); ``--model`` times the model's kernel everywhere,
ignoring the tuning database, which is how the database is rebuilt
(``python -m jax_tsmm.tune --from-bench``).
The report (``--json``, and Markdown beside it) is rewritten after every row
and marked ``"complete": true`` at the end, so that a run cut off keeps what it
timed; the plot and the summary table come at the end (``--summary`` prints the
table of saved reports).

``--ops mtsm`` adds the large × skinny products (``jax_tsmm.mtsm``, op "mtsm" for
A X and "mtsm_t" for Aᵀ X): M = K in MTSM_SIZES (``--mtsm-sizes``), N in MTSM_WIDTHS
(``--mtsm-widths``), against
``jnp.matmul`` at HIGHEST precision, as % of the read roofline (one read of A
and X, or the FLOP peak where that binds), with a panel of the plot per layout
and dtype.

``--k-sweep`` adds the ramp-up with K at the M = N of ``--k-sweep-widths``: its
rows, a panel of the plot per op and dtype (% of roofline against K), and a
table against issue 4's ramp-up targets (``ramp_up_summary``: the least speedup
over XLA at K = 2^16 and 2^20, and how many rows reach 80 % once the tall
matrices together exceed 256 MiB).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import itertools
import json
import lzma
import math
import pathlib
import statistics
import sys
import time
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_tsmm
from jax_tsmm import _cuda, _dispatch, _kernels, _mtsm

GIB = 1 << 30
# Rough upper bounds of current GPUs, only to size the timing loops of the ceilings.
NOMINAL_BANDWIDTH = 5e12
NOMINAL_FLOPS = 100e12
MTSM_SIZES = (8192, 16384, 30720)
MTSM_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
MTSM_OPS = ("mtsm", "mtsm_t")  # A X and Aᵀ X
DEFAULT_PAIRS = ((1, 8), (8, 1), (4, 16), (16, 4), (2, 32), (32, 2), (3, 7), (7, 3), (64, 8), (8, 64), (13, 48), (48, 13))


# --- timing ------------------------------------------------------------------

# Each timed loop runs at least this long (--loop-seconds). Loops of 20 ms end
# before an H200's 700 W power cap has lowered the SM clock far; a solver's
# sustained calls run at the clock the cap settles at, which loops of 0.3 s and
# more time (scripts/clocks_under_load.py; performance.md, twenty-first round).
LOOP_SECONDS = 0.02


def _timed_loop(op, operand_sets, updates_last: bool):
    """A jitted loop calling ``op`` once per operand set per trip, the trip count an
    argument (one compile serves every count). The outputs are carried through the
    loop and returned whole, so XLA must compute every element (it cannot narrow
    a dot to the part that is used), and the optimization barrier ties the
    operands to the carry, so XLA cannot hoist the loop-invariant calls out of the
    loop; neither costs anything at run time. The carry starts from zeros, whose
    fill ``seconds_per_call`` takes out with the rest of a run's fixed cost.
    With ``updates_last`` the output replaces each set's last operand (an update
    in place, as V - Q C inside a solver: the old V is dead, nothing is copied)."""

    def body(_, carry):
        if updates_last:
            return tuple((*o[:-1], op(*o)) for o in lax.optimization_barrier(carry))
        _, sets = lax.optimization_barrier(carry)
        return tuple(op(*operands) for operands in sets), sets

    @jax.jit
    def run(sets, trips):
        if updates_last:
            return lax.fori_loop(0, trips, body, tuple(sets))
        outs = jax.eval_shape(lambda s: tuple(op(*o) for o in s), sets)
        zeros = tuple(jnp.zeros(o.shape, o.dtype) for o in outs)
        return lax.fori_loop(0, trips, body, (zeros, sets))[0]

    return lambda trips: run(operand_sets, jnp.int32(trips))


def seconds_per_call(op, operand_sets, expected_seconds: float, *, repeats: int = 5,
                     updates_last: bool = False, loop_seconds: float | None = None) -> float:
    """Median time of one call: a loop of at least ``loop_seconds`` (default
    LOOP_SECONDS) at the ``expected_seconds`` per call (a lower bound such as the
    roofline; a slower call only lengthens the loop) less a loop of one trip, over
    the calls between them. The difference takes out what a run costs besides its
    calls (the launch, the carry's fill of zeros: 15 % of ab 1 x 8's time when it
    was counted in)."""
    return seconds_per_call_in_turns([op], operand_sets, expected_seconds, repeats=repeats,
                                     updates_last=updates_last, loop_seconds=loop_seconds)[0]


def seconds_per_call_in_turns(ops, operand_sets, expected_seconds: float, *, repeats: int = 5,
                              updates_last: bool = False, loop_seconds: float | None = None,
                              compiled_in=None) -> list[float]:
    """``seconds_per_call`` of each of ``ops`` on the same operands, their loops
    timed in ``repeats`` turns, each turn in the order opposite to the last's, so
    that each op meets the same clock and power history: timed one after the
    other, the second met a GPU the first had warmed (under a power cap the
    clock settles over about a second of calls; seventieth round).
    ``compiled_in``: for each op, a context manager (such as ``_dispatch.forced(spec)``)
    that its loop is compiled in, or None; the kernel it chose stays in the loop."""
    seconds = LOOP_SECONDS if loop_seconds is None else loop_seconds
    trips = max(2, min(1000, math.ceil(seconds / expected_seconds / len(operand_sets))))
    loops = [_timed_loop(op, operand_sets, updates_last) for op in ops]
    for loop, context in zip(loops, compiled_in or [None] * len(ops)):
        with context or contextlib.nullcontext():
            jax.block_until_ready(loop(1))  # compile, warm up
    samples = [[] for _ in ops]
    for turn in range(repeats):
        for i in (range(len(ops)) if turn % 2 == 0 else reversed(range(len(ops)))):
            start = time.perf_counter()
            jax.block_until_ready(loops[i](trips))
            middle = time.perf_counter()
            jax.block_until_ready(loops[i](1))
            end = time.perf_counter()
            samples[i].append(((middle - start) - (end - middle)) / ((trips - 1) * len(operand_sets)))
    return [statistics.median(s) for s in samples]


def set_loop_seconds(seconds: float) -> None:
    """The length of every timed loop from now on (the command lines' --loop-seconds)."""
    global LOOP_SECONDS
    LOOP_SECONDS = seconds


def add_loop_seconds_option(parser: argparse.ArgumentParser) -> None:
    """--loop-seconds, for the command lines that time kernels (pass its value to set_loop_seconds)."""
    parser.add_argument("--loop-seconds", type=float, default=LOOP_SECONDS,
                        help="length of each timed loop (0.3 and more: the clock a power cap settles at)")


# --- ceilings ------------------------------------------------------------------


def stream_read_seconds(buffers: list) -> float:
    """Seconds to read one of ``buffers`` (float32 vectors of one size, rotated)
    with the package's read probe at several grid sizes (1, 4 and 16 vectors per
    thread, and a persistent grid of 16 blocks per SM): the fastest."""
    vectors = buffers[0].size * 4 // 16
    return min(
        seconds_per_call(jax.ffi.ffi_call("tsmm_stream_read", jax.ShapeDtypeStruct((blocks,), jnp.float64)),
                         [(v,) for v in buffers], buffers[0].size * 4 / NOMINAL_BANDWIDTH)
        for blocks in (max(1, vectors // 256), max(1, vectors // 1024), max(1, vectors // 4096),
                       16 * _cuda.multiprocessors())
    )


def stream_ceilings() -> dict:
    """Read-only and copy bandwidth (bytes/s) of the streaming kernels on two 2 GiB buffers."""
    if not _cuda.register_targets():
        sys.exit("jax_tsmm.bench needs the CUDA extension")
    n = 2 * GIB // 4
    x = [jax.random.uniform(jax.random.key(i), (n,), jnp.float32) for i in range(2)]
    copy = jax.ffi.ffi_call("tsmm_stream_copy", jax.ShapeDtypeStruct((n,), jnp.float32))
    read_s = stream_read_seconds(x)
    copy_s = seconds_per_call(copy, [(v,) for v in x], 4 * GIB / NOMINAL_BANDWIDTH)
    return {"read_bytes_per_s": 2 * GIB / read_s, "copy_bytes_per_s": 2 * 2 * GIB / copy_s}


def measure_ceilings() -> dict:
    """The streaming kernels' bandwidths (``stream_ceilings``) and the FP64/FP32
    peak (flop/s) of a large matmul."""
    bandwidths = stream_ceilings()
    peaks = {}
    for dtype in (jnp.float64, jnp.float32):
        size = 8192
        a = jax.random.normal(jax.random.key(3), (size, size), dtype)
        matmul = lambda p, q: jnp.matmul(p, q, precision=lax.Precision.HIGHEST)
        peaks[np.dtype(dtype).name] = 2 * size**3 / seconds_per_call(matmul, [(a, a)], 2 * size**3 / NOMINAL_FLOPS)
    return {**bandwidths, "peak_flops": {**peaks, "complex128": peaks["float64"], "complex64": peaks["float32"]}}


# --- one shape -----------------------------------------------------------------


def problem_rows(m: int, n: int, dtype) -> int:
    """K such that the narrower tall matrix holds at least 1 GiB, unless that would
    make the wider one exceed 8 GiB (widths more than 8 apart)."""
    itemsize = np.dtype(dtype).itemsize
    return min(math.ceil(GIB / (min(m, n) * itemsize)), 8 * GIB // (max(m, n) * itemsize))


def _random(key, shape, dtype):
    if jnp.issubdtype(dtype, jnp.complexfloating):
        real = jnp.finfo(dtype).dtype
        re, im = jax.random.normal(key, (2, *shape), real)
        return lax.complex(re, im)
    return jax.random.normal(key, shape, dtype)


def moved_bytes(op: str, dtype, m: int, n: int, k: int) -> int:
    """The bytes a call moves at the least, each operand and the result once: atb
    reads A and B and writes M x N, ab reads A and C and writes K x N, ab_update
    reads Q, C and V and writes V, a Gram matrix ("gram", atb(a, a), M = N) reads
    A and writes M x M."""
    tall_columns = {"ab_update": m + 2 * n, "gram": m}.get(op, m + n)
    return (k * tall_columns + m * n) * np.dtype(dtype).itemsize


def roofline_seconds(op: str, dtype, m: int, n: int, k: int, ceilings: dict) -> float:
    complex_factor = 4 if jnp.issubdtype(dtype, jnp.complexfloating) else 1
    flops = 2 * complex_factor * k * m * n
    peak = ceilings["peak_flops"][np.dtype(dtype).name]
    bandwidth = ceilings["read_bytes_per_s" if op in ("atb", "gram") else "copy_bytes_per_s"]
    return max(moved_bytes(op, dtype, m, n, k) / bandwidth, flops / peak)


def operations(op: str):
    """(jax_tsmm's call, XLA's equivalent) for op "atb", "ab", "ab_update" or "gram"
    (atb(a, a), Aᴴ A for a complex ``a``: ``named_problem``)."""
    highest = lax.Precision.HIGHEST
    if op == "atb":
        return jax_tsmm.atb, lambda a, b: jnp.matmul(a.T, b, precision=highest)
    if op == "gram":
        return (lambda a: jax_tsmm.atb(a, a, conj=jnp.iscomplexobj(a)),
                lambda a: jnp.matmul(jnp.conj(a).T, a, precision=highest))
    if op == "ab":
        return jax_tsmm.ab, lambda a, c: jnp.matmul(a, c, precision=highest)
    return (lambda q, c, v: jax_tsmm.ab(q, c, out=v, alpha=-1, beta=1),
            lambda q, c, v: v - jnp.matmul(q, c, precision=highest))


# Each trip of a timed loop costs 20-25 µs besides its calls: XLA's while loop,
# whose trip count is an argument, waits on the host after each trip (H200,
# h200-2026-11-25n-read-sets-per-trip.log.xz). Two sets of the bench's gigabyte
# operands carry about 2 % of it, as the read ceiling's 2 GiB buffers do;
# smaller operands rotate more sets, up to ROTATED_BYTES in all, so that a
# call's share stays about as small (at two sets, 10-12 µs a call: an eighth of
# mtsm's time at 8192, a fifth of the K sweep's at 2^20 x 8).
ROTATED_BYTES = 4 * GIB
MAX_SETS = 32
# The loop keeps every set's operands and result: with many small operands and a
# wide result (ab 1 x 58 in complex64: 8 GiB a result) 29 sets asked 224 GiB.
HELD_BYTES = 16 * GIB


def set_count(set_bytes: int, result_bytes: int = 0) -> int:
    """The operand sets a timed loop rotates between, for operands of ``set_bytes``
    and a result of ``result_bytes`` a set."""
    return max(2, min(MAX_SETS, ROTATED_BYTES // set_bytes, HELD_BYTES // (set_bytes + result_bytes)))


def operand_sets(op: str, dtype, m: int, n: int, k: int, seed: int, batch: tuple = ()) -> list[tuple]:
    """Sets of fresh random operands, each of shape ``batch`` + the problem's, for
    the timing loops to rotate between (``set_count``: two of the bench's 1 GiB
    matrices, more of smaller ones)."""
    shapes = {"atb": [(k, m), (k, n)], "ab": [(k, m), (m, n)], "ab_update": [(k, m), (m, n), (k, n)],
              "gram": [(k, m)]}[op]
    shapes = [batch + shape for shape in shapes]
    # the update's result is its last operand
    result = {"atb": m * n, "ab": k * n, "ab_update": 0, "gram": m * n}[op] * math.prod(batch)
    itemsize = np.dtype(dtype).itemsize
    count = set_count(sum(math.prod(shape) for shape in shapes) * itemsize, result * itemsize)
    keys = iter(jax.random.split(jax.random.key(seed), count * len(shapes)))
    return [tuple(_random(next(keys), shape, dtype) for shape in shapes) for _ in range(count)]


def timed_kernel(op: str, dtype, m: int, n: int, k: int, device: str | None = None):
    """The kernel a call of this shape runs on this GPU, or None for XLA's dot; or
    the kernel dispatch picks for the GPU model ``device`` names."""
    problem = _dispatch.named_problem(op, np.dtype(dtype).name, m, n)
    spec = _dispatch.select_problem(problem, k, _cuda.arch(), _cuda.device_kind() if device is None else device)
    return spec if device is not None else _runs_here(spec)


def timed_mtsm_kernel(dtype, transpose_a: bool, n: int, size: int, device: str | None = None):
    """``timed_kernel`` of mtsm's M = K = ``size`` grid: the kernel an unbatched call runs."""
    spec = _mtsm.select(dtype, transpose_a, n, False, size, _cuda.arch(),
                        _cuda.device_kind() if device is None else device)
    return spec if device is not None else _runs_here(spec)


def _runs_here(spec):
    """``spec``, or None where the lowering takes XLA's dot for it instead: a kernel
    outside the prebuilt set with no nvcc to compile it (``_kernels.runnable``,
    which warns)."""
    return spec if spec is None or _kernels.runnable(spec) else None


def kernels_to_time(ops, dtypes, shapes, sweep_widths, sweep_ks, model: bool,
                    mtsm_sizes=MTSM_SIZES, mtsm_widths=MTSM_WIDTHS, device: str | None = None) -> list:
    """Every kernel a run of these rows, K sweep (empty ``sweep_widths``: none) and,
    with op "mtsm", mtsm grid times, each once: compiled in parallel before the
    first timing (the K sweep's, one at a time as they came, had held the GPU idle).
    ``device``: those of that GPU model's dispatch instead of this GPU's."""
    tall_ops = [op for op in ops if op != "mtsm"]
    with dispatch_context(model):
        specs = [timed_kernel(op, d, m, n, problem_rows(m, n, d), device) for d in dtypes for op in tall_ops
                 for m, n in op_shapes(op, shapes)]
        specs += [timed_kernel(op, d, w, w, k, device) for d, w, k in sweep_points(dtypes, sweep_widths, sweep_ks)
                  for op in tall_ops]
        if "mtsm" in ops:
            specs += [timed_mtsm_kernel(d, t, n, size, device)
                      for d in dtypes for t in (False, True) for n in mtsm_widths for size in mtsm_sizes]
    return [spec for spec in dict.fromkeys(specs) if spec is not None]


def op_shapes(op: str, shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (M, N) of ``shapes`` that ``op`` has: a Gram matrix's are square."""
    return [(m, n) for m, n in shapes if m == n or op != "gram"]


def dispatch_context(model: bool):
    """With ``model``, dispatch by the model's kernels, ignoring the tuning database."""
    return _dispatch.model_only() if model else contextlib.nullcontext()


def bench_shape(op: str, dtype, m: int, n: int, k: int, ceilings: dict, model: bool = False) -> dict:
    sets = operand_sets(op, dtype, m, n, k, m * 1000 + n)
    ours, xla = operations(op)
    best = roofline_seconds(op, dtype, m, n, k, ceilings)
    in_place = op == "ab_update"
    with dispatch_context(model):
        spec = timed_kernel(op, dtype, m, n, k)
        ours_s, xla_s = seconds_per_call_in_turns([ours, xla], sets, best, updates_last=in_place)
    del sets
    return {
        "op": op, "dtype": np.dtype(dtype).name, "M": m, "N": n, "K": k,
        "config": dataclasses.asdict(spec.config) if spec else None,
        "real_view": spec is not None and _dispatch.is_real_view(spec, dtype),
        "bytes": moved_bytes(op, dtype, m, n, k), "tsmm_s": ours_s, "xla_s": xla_s,
        "tsmm_pct": 100 * best / ours_s, "xla_pct": 100 * best / xla_s,
        "speedup": xla_s / ours_s,
    }


# --- mtsm: a large dense A times a tall & skinny X ------------------------------------


def mtsm_moved_bytes(dtype, m: int, n: int, k: int) -> int:
    """One read of A and X (the result is small)."""
    return (m * k + k * n) * np.dtype(dtype).itemsize


def mtsm_roofline_seconds(dtype, m: int, n: int, k: int, ceilings: dict) -> float:
    """One read of A and X at the read ceiling, or the FLOP peak where that binds."""
    complex_factor = 4 if jnp.issubdtype(dtype, jnp.complexfloating) else 1
    memory = mtsm_moved_bytes(dtype, m, n, k) / ceilings["read_bytes_per_s"]
    flops = 2 * complex_factor * m * n * k
    return max(memory, flops / ceilings["peak_flops"][np.dtype(dtype).name])


def mtsm_operations(transpose_a: bool):
    """The timed calls: jax_tsmm.mtsm, and XLA's dot at HIGHEST precision."""
    highest = lax.Precision.HIGHEST
    ours = lambda a, x: jax_tsmm.mtsm(a, x, transpose_a=transpose_a)
    if transpose_a:
        return ours, lambda a, x: jnp.matmul(a.T, x, precision=highest)
    return ours, lambda a, x: jnp.matmul(a, x, precision=highest)


def mtsm_set_count(dtype, m: int, k: int, n: int) -> int:
    """The operand sets of A (M x K elements) and X (K, N) a timed loop rotates."""
    return set_count((m * k + k * n) * np.dtype(dtype).itemsize)


def mtsm_operand_sets(dtype, m: int, k: int, n: int, seed: int, transpose_a: bool = False) -> list[tuple]:
    """Sets of fresh random operands, A (M, K), or (K, M) with ``transpose_a``, and
    X (K, N) (the tuner's and scripts'; the bench shares its A matrices between widths)."""
    count = mtsm_set_count(dtype, m, k, n)
    keys = iter(jax.random.split(jax.random.key(seed), 2 * count))
    a_shape = (k, m) if transpose_a else (m, k)
    return [(_random(next(keys), a_shape, dtype), _random(next(keys), (k, n), dtype)) for _ in range(count)]


def mtsm_rows(dtypes, ceilings: dict, model: bool = False, sizes=MTSM_SIZES,
              widths=MTSM_WIDTHS) -> Iterator[dict]:
    """Every (dtype, M = K in ``sizes``, N in ``widths``, transpose_a) of the mtsm
    grid, each row as it is timed; one pair of A matrices per dtype and size
    serves both layouts and every N."""
    for dtype in dtypes:
        for size in sizes:
            count = mtsm_set_count(dtype, size, size, max(widths))
            keys = jax.random.split(jax.random.key(size), count + len(widths))
            matrices = [_random(keys[i], (size, size), dtype) for i in range(count)]
            for width, key in zip(widths, keys[count:]):
                xs = [_random(k, (size, width), dtype) for k in jax.random.split(key, count)]
                sets = list(zip(matrices, xs))
                best = mtsm_roofline_seconds(dtype, size, width, size, ceilings)
                for transpose_a in (False, True):
                    ours, xla = mtsm_operations(transpose_a)
                    with dispatch_context(model):
                        spec = timed_mtsm_kernel(dtype, transpose_a, width, size)
                        ours_s, xla_s = seconds_per_call_in_turns([ours, xla], sets, best)
                    yield {
                        "op": MTSM_OPS[transpose_a], "dtype": np.dtype(dtype).name,
                        "M": size, "N": width, "K": size,
                        "config": dataclasses.asdict(spec.config) if spec else None,
                        "bytes": mtsm_moved_bytes(dtype, size, width, size), "tsmm_s": ours_s, "xla_s": xla_s,
                        "tsmm_pct": 100 * best / ours_s, "xla_pct": 100 * best / xla_s,
                        "speedup": xla_s / ours_s,
                    }
            del matrices


K_SWEEP = tuple(1 << log_k for log_k in range(10, 29, 2))
SWEEP_MAX_BYTES = 4 * GIB  # of a tall matrix in the K sweep


def sweep_points(dtypes, widths, ks) -> list[tuple]:
    """The (dtype, M = N, K) of the K sweep: K up to SWEEP_MAX_BYTES a tall matrix."""
    return [(dtype, width, k) for dtype in dtypes for width in widths for k in ks
            if k * width * np.dtype(dtype).itemsize <= SWEEP_MAX_BYTES]


def k_sweep(ceilings: dict, ops, dtypes, widths, ks=K_SWEEP, model: bool = False) -> Iterator[dict]:
    """Ramp-up with K for each op, dtype and M = N in ``widths`` (``sweep_points``),
    each row as it is timed."""
    for dtype, width, k in sweep_points(dtypes, widths, ks):
        for op in ops:
            yield bench_shape(op, dtype, width, width, k, ceilings, model)


# --- reporting -----------------------------------------------------------------


def kernel_label(row: dict) -> str:
    """Which kind of kernel a row's jax_tsmm call ran, from the configuration it names:
    the instruction, then Gauss's three products, the Gram triangle, FMA edges and the
    real view where they apply."""
    c = row.get("config")
    if c is None:
        return "XLA dot"
    label = ("wgmma 3xTF32" if c.get("wgmma") else "mma.sync 3xTF32" if c.get("tf32x3") else
             "DMMA" if c.get("mma") else "FMA flat" if c.get("mapping") == "flat" else "FMA")
    marks = [("gauss", ", Gauss"), ("triangle", ", triangle"), ("fma_edges", ", FMA edges")]
    return (label + "".join(mark for field, mark in marks if c.get(field))
            + (", real view" if row.get("real_view") else ""))


def gigabytes_per_s(row: dict, library: str) -> float:
    """The bytes a row's call moves at the least over ``library``'s ("tsmm" or "xla") time."""
    return row["bytes"] / row[f"{library}_s"] / 1e9


def _print_row(row: dict) -> None:
    print(
        f"{row['op']:>6} {row['dtype']:>10} {row['M']:>3}x{row['N']:<3} K={row['K']:>10}  "
        f"tsmm {row['tsmm_s'] * 1e3:8.3f} ms {gigabytes_per_s(row, 'tsmm'):5.0f} GB/s {row['tsmm_pct']:5.1f}%   "
        f"xla {row['xla_s'] * 1e3:8.3f} ms {gigabytes_per_s(row, 'xla'):5.0f} GB/s {row['xla_pct']:5.1f}%   "
        f"x{row['speedup']:.2f}   ({kernel_label(row)})",
        flush=True,
    )


def shape_set(row: dict) -> str:
    """The set a row's targets are stated over (issue 4): M = N, or the M != N pairs;
    mtsm's grid is one set."""
    if row["op"] in MTSM_OPS:
        return "grid"
    return "M = N" if row["M"] == row["N"] else "pairs"


def summary(rows: list[dict]) -> str:
    """One line per op, dtype and shape set: the least and the geometric mean of the
    % of roofline, how many rows reach 90 % and 85 %, and the speedup over XLA, its
    least also over the rows that ran a kernel (where dispatch chose XLA's dot both
    sides time the same dot, and their ratio is the timer's spread)."""
    lines = ["    op      dtype    set  shapes   min%  geomean%  >=90%  >=85%  xla geomean%  "
             "geomean speedup  min speedup  kernels' min"]
    groups = {}
    for row in rows:
        groups.setdefault((row["op"], row["dtype"], shape_set(row)), []).append(row)
    geo = lambda xs: math.exp(statistics.fmean(math.log(x) for x in xs))
    for (op, dtype, shapes), group in sorted(groups.items()):
        pct = [r["tsmm_pct"] for r in group]
        kernels = [r["speedup"] for r in group if r["config"]]  # the rows that ran a kernel
        lines.append(
            f"{op:>6} {dtype:>10} {shapes:>6} {len(group):>7} {min(pct):6.1f} {geo(pct):9.1f} "
            f"{sum(p >= 90 for p in pct):6} {sum(p >= 85 for p in pct):6} "
            f"{geo([r['xla_pct'] for r in group]):13.1f} {geo([r['speedup'] for r in group]):16.2f} "
            f"{min(r['speedup'] for r in group):12.2f}"
            + (f"{min(kernels):14.2f}" if kernels else f"{'-':>14}")
        )
    return "\n".join(lines)


# Issue 4's ramp-up targets: at least XLA's speed at these K, and RAMP_UP_PCT of the
# roofline once the tall matrices together exceed RAMP_UP_BYTES.
RAMP_UP_KS = (1 << 16, 1 << 20)
RAMP_UP_BYTES = 256 << 20
RAMP_UP_PCT = 80.0


def tall_bytes(row: dict) -> int:
    """The bytes of a row's tall matrices together: A and B (atb), A and the K x N
    result (ab and its fused update), A alone (the Gram matrix)."""
    columns = row["M"] if row["op"] == "gram" else row["M"] + row["N"]
    return row["K"] * columns * np.dtype(row["dtype"]).itemsize


def ramp_up_summary(rows: list[dict]) -> str:
    """One line per op and dtype of a K sweep, against the ramp-up targets: the
    least speedup over XLA at each of RAMP_UP_KS, and of the rows whose tall
    matrices exceed RAMP_UP_BYTES how many reach RAMP_UP_PCT and the least %."""
    at_ks = "".join(f"{f'min x at 2^{k.bit_length() - 1}':>14}" for k in RAMP_UP_KS)
    lines = [f"    op      dtype  widths{at_ks}  rows > {RAMP_UP_BYTES >> 20} MiB  >={RAMP_UP_PCT:.0f}%   min%"]
    groups = {}
    for row in rows:
        groups.setdefault((row["op"], row["dtype"]), []).append(row)
    for (op, dtype), group in sorted(groups.items()):
        line = f"{op:>6} {dtype:>10} {len({r['M'] for r in group}):7}"
        for k in RAMP_UP_KS:
            speedups = [r["speedup"] for r in group if r["K"] == k]
            line += f"{min(speedups):14.2f}" if speedups else f"{'-':>14}"
        large = [r["tsmm_pct"] for r in group if tall_bytes(r) > RAMP_UP_BYTES]
        line += f"{len(large):16} {sum(p >= RAMP_UP_PCT for p in large):6}"
        line += f" {min(large):6.1f}" if large else f" {'-':>6}"
        lines.append(line)
    return "\n".join(lines)


def markdown(report: dict) -> str:
    """The report as Markdown tables (for docs/performance.md)."""
    c = report["ceilings"]
    lines = [
        f"{report['device']}, jax {report['jax']}, {report['date']}. Ceilings: read "
        f"{c['read_bytes_per_s'] / 1e9:.0f} GB/s, copy {c['copy_bytes_per_s'] / 1e9:.0f} GB/s, "
        f"FP64 {c['peak_flops']['float64'] / 1e12:.1f} TFLOP/s, FP32 {c['peak_flops']['float32'] / 1e12:.1f} TFLOP/s.",
        "",
        "| op | dtype | M | N | K | kernel | jax_tsmm ms | GB/s | % roofline | XLA ms | XLA GB/s | XLA % | speedup |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"] + report["k_sweep"]:
        lines.append(
            f"| {r['op']} | {r['dtype']} | {r['M']} | {r['N']} | {r['K']} | {kernel_label(r)} | "
            f"{r['tsmm_s'] * 1e3:.3f} | {gigabytes_per_s(r, 'tsmm'):.0f} | {r['tsmm_pct']:.1f} | "
            f"{r['xla_s'] * 1e3:.3f} | {gigabytes_per_s(r, 'xla'):.0f} | {r['xla_pct']:.1f} | {r['speedup']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def write_report(report: dict, path: str) -> None:
    """The report as JSON at ``path`` and as Markdown beside it (.md)."""
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    with open(path.removesuffix(".json") + ".md", "w") as f:
        f.write(markdown(report))


def read_report(path: str | pathlib.Path) -> dict:
    """A report written by ``write_report``, also as docs/bench keeps it, packed by xz (.json.xz)."""
    path = pathlib.Path(path)
    text = lzma.open(path, "rt").read() if path.suffix == ".xz" else path.read_text()
    return json.loads(text)


OP_TITLES = {"atb": "Aᵀ B", "ab": "A C", "ab_update": "V − Q C", "gram": "Aᴴ A", "mtsm": "A X", "mtsm_t": "Aᵀ X"}


def plot(rows: list[dict], path: str, device: str, sweep_rows: list[dict] = ()) -> None:
    """The papers' figure: % of roofline against width, a panel per op and dtype,
    then a panel per op and dtype of the K sweep's ``sweep_rows``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    square_panels = sorted({(r["op"], r["dtype"]) for r in rows if r["op"] not in MTSM_OPS})
    mtsm_panels = sorted({(r["op"], r["dtype"]) for r in rows if r["op"] in MTSM_OPS})
    sweep_panels = sorted({(r["op"], r["dtype"]) for r in sweep_rows})
    panels = [(rows, panel) for panel in square_panels + mtsm_panels] + [(sweep_rows, panel) for panel in sweep_panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3 * len(panels)), squeeze=False, layout="constrained")
    for ax, (source, (op, dtype)) in zip(axes[:, 0], panels):
        panel_rows = [r for r in source if (r["op"], r["dtype"]) == (op, dtype)]
        title = f"{OP_TITLES[op]} {dtype}"
        if source is sweep_rows:
            _plot_sweep_panel(ax, panel_rows, title)
        elif op in MTSM_OPS:
            _plot_mtsm_panel(ax, panel_rows, title)
        else:
            _plot_square_panel(ax, panel_rows, title)
        ax.set_ylim(0, 110)
        ax.axhline(90, color="gray", lw=0.5, ls="--")
        ax.set_ylabel("% of roofline")
        ax.legend(fontsize="small")
    fig.suptitle(device)
    fig.savefig(path, dpi=120)


def _plot_square_panel(ax, rows: list[dict], title: str) -> None:
    """% of roofline against M = N, both libraries (the papers' figures)."""
    square = sorted((r for r in rows if r["M"] == r["N"]), key=lambda r: r["M"])
    widths = [r["M"] for r in square]
    ax.plot(widths, [r["tsmm_pct"] for r in square], "o-", ms=3, label="jax_tsmm")
    ax.plot(widths, [r["xla_pct"] for r in square], "s-", ms=3, label="XLA dot")
    ax.set_title(f"{title}, M = N")
    ax.set_xlabel("M = N")


def _plot_lines(ax, rows: list[dict], group: str, along: str) -> None:
    """% of roofline against ``along`` (a row's field) on a log2 axis, a colour per
    value of ``group``, both libraries."""
    for index, value in enumerate(sorted({r[group] for r in rows})):
        line = sorted((r for r in rows if r[group] == value), key=lambda r: r[along])
        xs = [r[along] for r in line]
        ax.plot(xs, [r["tsmm_pct"] for r in line], "o-", ms=3, color=f"C{index}", label=f"jax_tsmm {value}")
        ax.plot(xs, [r["xla_pct"] for r in line], "s--", ms=3, color=f"C{index}", label=f"XLA dot {value}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(along)


def _plot_mtsm_panel(ax, rows: list[dict], title: str) -> None:
    """% of the read roofline against N, a colour per M = K, both libraries."""
    _plot_lines(ax, rows, "M", "N")
    widths = sorted({r["N"] for r in rows})
    ax.set_xticks(widths, [str(n) for n in widths])
    ax.set_title(f"{title}, M = K")


def _plot_sweep_panel(ax, rows: list[dict], title: str) -> None:
    """% of roofline against K (the ramp-up), a colour per M = N, both libraries."""
    _plot_lines(ax, rows, "M", "K")
    ax.set_title(f"{title}, K sweep, M = N")


def parse_widths(text: str) -> list[int]:
    """"1-8,13,16" -> [1, ..., 8, 13, 16]."""
    widths = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        widths += list(range(int(lo), int(hi or lo) + 1))
    return widths


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """"1-3,13x48" -> [(1, 1), (2, 2), (3, 3), (13, 48)]."""
    shapes = []
    for part in text.split(","):
        if "x" in part:
            m, n = part.split("x")
            shapes.append((int(m), int(n)))
        else:
            shapes += [(w, w) for w in parse_widths(part)]
    return shapes


def grid_pairs(text: str) -> list[tuple[int, int]]:
    """"1,2,4" -> every pair M != N of these widths: [(1, 2), (1, 4), (2, 1), ...]."""
    widths = parse_widths(text)
    return [(m, n) for m in widths for n in widths if m != n]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float64,float32,complex128,complex64")
    parser.add_argument("--ops", default="atb,ab")
    parser.add_argument("--widths", default="1-64", help="M = N values, e.g. 1-64 or 1,2,8")
    parser.add_argument("--pairs", default=",".join(f"{m}x{n}" for m, n in DEFAULT_PAIRS),
                        help="the M != N pairs, e.g. 1x21,30x1 (default: the twelve of DEFAULT_PAIRS)")
    parser.add_argument("--no-pairs", action="store_true", help="skip the M != N pairs")
    parser.add_argument("--no-squares", action="store_true",
                        help="skip the M = N rows (e.g. a K sweep or the mtsm grid alone)")
    parser.add_argument("--pair-grid", default=None,
                        help="every M != N pair of these widths, e.g. 1-4,6,8 (in place of --pairs): with "
                             "--model, the surveys that tune --from-bench records for dispatch's pair rules")
    parser.add_argument("--mtsm-sizes", default=",".join(map(str, MTSM_SIZES)),
                        help="mtsm's M = K values (with --ops mtsm)")
    parser.add_argument("--mtsm-widths", default=",".join(map(str, MTSM_WIDTHS)),
                        help="mtsm's N values, e.g. 1-64 or 3,12,24 (with --ops mtsm)")
    parser.add_argument("--k-sweep", action="store_true", help="add the ramp-up with K")
    parser.add_argument("--k-sweep-widths", default="8", help="M = N values of the K sweep")
    parser.add_argument("--k-sweep-k", default=",".join(map(str, K_SWEEP)), help="K values of the K sweep")
    parser.add_argument("--model", action="store_true",
                        help="time the model's kernels, ignoring the tuning database")
    add_loop_seconds_option(parser)
    parser.add_argument("--json", default="bench.json")
    parser.add_argument("--plot", default="bench.png")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile the kernels the run would time into the kernel cache ($JAX_TSMM_CACHE_DIR) "
                             "and stop, on any machine with nvcc, for the cache to travel to the GPU machine (with "
                             "--model; dispatch's own kernels depend on the GPU's database: see --device)")
    parser.add_argument("--device", default=None,
                        help="with --compile-only: the GPU model whose dispatch to compile for, its own tuning "
                             "file over the architecture's, e.g. \"NVIDIA H200\" (default: this machine's GPU, "
                             "or the architecture's file alone without one)")
    parser.add_argument("--summary", nargs="+", default=None, metavar="REPORT",
                        help="print the summary table of these reports (--json of earlier runs, those cut off "
                             "included) and stop (no GPU needed)")
    args = parser.parse_args(argv)
    if args.summary:
        for path in args.summary:
            report = read_report(path)
            state = "" if report.get("complete", True) else ", cut off"  # reports before the flag were whole
            print(f"{path}: {report['device']}, {report['date']}, {len(report['rows'])} rows{state}")
            print(summary(report["rows"]))
            if report.get("k_sweep"):
                print(ramp_up_summary(report["k_sweep"]))
        return
    if args.device is not None and not args.compile_only:
        parser.error("--device goes with --compile-only: a run times the GPU it runs on")
    set_loop_seconds(args.loop_seconds)
    jax.config.update("jax_enable_x64", True)
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    ops = args.ops.split(",")
    pairs = grid_pairs(args.pair_grid) if args.pair_grid else parse_shapes(args.pairs)
    squares = [] if args.no_squares else [(w, w) for w in parse_widths(args.widths)]
    shapes = squares + ([] if args.no_pairs else pairs)
    tall_ops = [op for op in ops if op != "mtsm"]
    sweep_widths = parse_widths(args.k_sweep_widths) if args.k_sweep else []
    sweep_ks = [int(k) for k in args.k_sweep_k.split(",")]
    mtsm_sizes = [int(size) for size in args.mtsm_sizes.split(",")]
    mtsm_widths = parse_widths(args.mtsm_widths)
    kernels = kernels_to_time(ops, dtypes, shapes, sweep_widths, sweep_ks, args.model, mtsm_sizes, mtsm_widths,
                              args.device)
    if args.compile_only:
        _kernels.precompile(kernels, _cuda.arch())  # the default architecture where this machine has no GPU
        model = f" ({args.device})" if args.device else ""
        print(f"{len(kernels)} kernels for {_cuda.arch()}{model} in {_kernels.cache_dir()}")
        return
    device = jax.devices()[0]
    if device.platform != "gpu":
        sys.exit("jax_tsmm.bench needs a GPU")
    print(f"{device.device_kind}, jax {jax.__version__}, {datetime.date.today()}", flush=True)
    ceilings = measure_ceilings()
    print(
        f"ceilings: read {ceilings['read_bytes_per_s'] / 1e9:.0f} GB/s, copy {ceilings['copy_bytes_per_s'] / 1e9:.0f} GB/s, "
        + ", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in ceilings["peak_flops"].items() if k.startswith("float")),
        flush=True,
    )
    # In parallel, before any timing; said, since on a fresh install it is the first run's longest wait.
    print(f"{len(kernels)} kernels to time: compiling those neither prebuilt nor in {_kernels.cache_dir()}", flush=True)
    started = time.perf_counter()
    _kernels.precompile(kernels, _cuda.arch())
    print(f"kernels ready in {time.perf_counter() - started:.0f} s", flush=True)
    problems = [(op, d, m, n) for d in dtypes for op in tall_ops for m, n in op_shapes(op, shapes)]
    mtsm_count = 2 * len(dtypes) * len(mtsm_sizes) * len(mtsm_widths) if "mtsm" in ops else 0
    total = len(problems) + mtsm_count + len(tall_ops) * len(sweep_points(dtypes, sweep_widths, sweep_ks))
    counter = itertools.count(1)
    report = {
        "device": device.device_kind, "date": str(datetime.date.today()), "jax": jax.__version__,
        "ceilings": ceilings, "loop_seconds": LOOP_SECONDS, "rows": [], "k_sweep": [], "complete": False,
    }

    def show(row: dict, section: str = "rows") -> None:
        """Progress: every row as it is timed, numbered; and the report so far on
        disk (the row in its ``section``), so that a run cut off at a device call's
        limit keeps its rows."""
        report[section].append(row)
        print(f"[{next(counter)}/{total}] ", end="")
        _print_row(row)
        write_report(report, args.json)

    for op, dtype, m, n in problems:
        show(bench_shape(op, dtype, m, n, problem_rows(m, n, dtype), ceilings, args.model))
    for row in mtsm_rows(dtypes, ceilings, args.model, mtsm_sizes, mtsm_widths) if "mtsm" in ops else ():
        show(row)
    for row in k_sweep(ceilings, tall_ops, dtypes, sweep_widths, sweep_ks, args.model):
        show(row, "k_sweep")
    report["complete"] = True
    write_report(report, args.json)
    rows = report["rows"]
    if rows or report["k_sweep"]:
        plot(rows, args.plot, f"{device.device_kind} ({datetime.date.today()})", report["k_sweep"])
    if rows:
        print(summary(rows))
    if report["k_sweep"]:
        print(ramp_up_summary(report["k_sweep"]))


if __name__ == "__main__":
    main()
