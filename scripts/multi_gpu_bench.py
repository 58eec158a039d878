"""atb, ab and a Gram matrix on inputs sharded along the long axis K, over 1, 2, ... devices.

Weak scaling: every device holds the same share of A and B (``--gib`` GiB each,
float64 by default), so K grows with the device count. Reports, per op and
device count, the time, the throughput (bytes of the tall operands read and
written, over the time) and the speedup over one device; atb on 2 devices
should reach about 1.9x (the all-reduce of the small M x N result is all the
communication there is).

    python scripts/multi_gpu_bench.py                # the GPUs jax.devices() offers
    python scripts/multi_gpu_bench.py --small        # tiny sizes; on CPU, 2 host devices

Also checks that each program has the expected communication (atb and the
Gram matrix atb(a, a): one all-reduce, no all-gather; ab: none), whether the
per-shard computation is the generated kernel (``tsmm_atb`` / ``tsmm_ab`` custom
calls, ``tsmm_atb_gram`` reading the shard once) and that the sharded result
matches the one-device result.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="tiny sizes (a smoke run; CPU gets 2 host devices)")
    p.add_argument("--gib", type=float, default=2.0, help="GiB of A (and of B) per device (default 2)")
    p.add_argument("--m", type=int, default=24, help="columns of A (default 24)")
    p.add_argument("--n", type=int, default=24, help="columns of B and C (default 24)")
    p.add_argument("--dtype", default="float64", choices=["float32", "float64", "complex64", "complex128"])
    p.add_argument("--repeats", type=int, default=20, help="timed runs per case (median reported)")
    p.add_argument("--devices", type=int, nargs="*", help="device counts to run (default 1, 2, 4, 8 up to all)")
    return p.parse_args()


args = parse_args()
if args.small:
    # Before JAX starts: on CPU, 2 host devices (ignored by GPU backends).
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jax_tsmm  # noqa: E402

jax.config.update("jax_enable_x64", True)


def make(shape, dtype, sharding, seed):
    """Random data created where it lives (no host transfer of GiBs)."""

    def gen(key):
        x = jax.random.normal(key, shape, jnp.float64 if "64" in dtype else jnp.float32)
        return x.astype(dtype)

    return jax.jit(gen, out_shardings=sharding)(jax.random.key(seed))


def timed(compiled, *xs, repeats):
    compiled(*xs).block_until_ready()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(*xs).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def collectives(text):
    ops = r"all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter"
    return sorted(set(re.findall(rf"= \S+ ({ops})(?:-start)?\(", text)))


def gram(a):
    return jax_tsmm.atb(a, a)


# Per op: the function of the tall operand (and y), whether y is tall, and the
# marker of its kernel in the compiled program.
OPS = {
    "atb": (jax_tsmm.atb, True, "tsmm_atb"),
    "ab": (jax_tsmm.ab, False, "tsmm_ab"),
    "gram": (gram, None, "tsmm_atb_gram"),  # one operand: each device's kernel reads its shard once
}


def run_case(op, n_dev, k_per_dev, m, n, dtype, repeats):
    devices = jax.devices()[:n_dev]
    # Automatic axes: the check below slices sharded arrays outside jit.
    mesh = jax.make_mesh((n_dev,), ("k",), devices=devices, axis_types=(jax.sharding.AxisType.Auto,))
    tall, rep = NamedSharding(mesh, P("k")), NamedSharding(mesh, P())
    k = k_per_dev * n_dev
    fun, y_tall, marker = OPS[op]
    a = make((k, m), dtype, tall, 0)
    if y_tall is None:
        operands, shardings, out_sharding, moved = (a,), (tall,), rep, a.nbytes
    elif y_tall:
        y = make((k, n), dtype, tall, 1)
        operands, shardings, out_sharding, moved = (a, y), (tall, tall), rep, a.nbytes + y.nbytes
    else:
        y = make((m, n), dtype, rep, 1)
        operands, shardings, out_sharding = (a, y), (tall, rep), tall
        moved = a.nbytes + k * n * a.dtype.itemsize
    fn = jax.jit(fun, in_shardings=shardings, out_shardings=out_sharding)
    compiled = fn.lower(*operands).compile()
    text = compiled.as_text()
    seconds = timed(compiled, *operands, repeats=repeats)
    # Against one device, on the first rows (the whole would not fit twice).
    rows = min(k, 1 << 16) // n_dev * n_dev
    head = [jax.device_put(x[:rows], tall) if s is tall else x for x, s in zip(operands, shardings)]
    got = np.asarray(fn(*head))
    ref = np.asarray(fun(*(jax.device_put(x, devices[0]) for x in head)))
    error = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-300))
    return dict(op=op, devices=n_dev, k=k, seconds=seconds, gbps=moved / seconds / 1e9,
                collectives=collectives(text), kernel=marker in text, error=error)


def main():
    available = len(jax.devices())
    counts = args.devices or [c for c in (1, 2, 4, 8) if c <= available]
    counts = [c for c in counts if c <= available]
    dtype = np.dtype(args.dtype)
    m, n = (8, 8) if args.small else (args.m, args.n)
    k_per_dev = 4096 if args.small else int(args.gib * 2**30 // (m * dtype.itemsize))
    repeats = 3 if args.small else args.repeats
    print(f"jax {jax.__version__}; {available} x {jax.devices()[0].device_kind}; {dtype.name}, "
          f"M={m}, N={n}, K per device={k_per_dev:,} "
          f"({k_per_dev * m * dtype.itemsize / 2**30:.3g} GiB of A per device)")
    if available < 2:
        print("only one device: no speedup to measure", file=sys.stderr)
    header = f"{'op':4} {'devices':>7} {'K':>14} {'ms':>9} {'GB/s':>9} {'speedup':>8}  {'collectives':18} kernel  rel.err"
    print(header)
    results = {}
    for op in OPS:
        for count in counts:
            r = run_case(op, count, k_per_dev, m, n, dtype.name, repeats)
            results[op, count] = r
            # Weak scaling: the speedup is the ratio of throughputs.
            one = results.get((op, 1))
            r["speedup"] = speedup = r["gbps"] / one["gbps"] if one else float("nan")
            print(f"{op:4} {count:7d} {r['k']:14,d} {r['seconds'] * 1e3:9.3f} {r['gbps']:9.1f} "
                  f"{speedup:7.2f}x  {','.join(r['collectives']) or '-':18} {'yes' if r['kernel'] else 'no':6}  "
                  f"{r['error']:.1e}")
    if ("atb", 2) in results and ("atb", 1) in results:
        s = results["atb", 2]["speedup"]
        verdict = "meets" if s >= 1.9 else "below"
        print(f"atb 2-device speedup: {s:.2f}x ({verdict} the 1.9x target)")
    for op in ("ab", "gram"):
        if (op, 2) in results and (op, 1) in results:
            print(f"{op} 2-device speedup: {results[op, 2]['speedup']:.2f}x")
    bad = [r for r in results.values() if "all-gather" in r["collectives"] or r["error"] > 1e-6]
    if bad:
        print("FAILED: unexpected all-gather or wrong result", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
