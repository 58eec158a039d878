"""atb and ab over a batch: dispatch's choice against XLA's dot and the kernel of the batch's total rows.

    python3 scripts/batched_timing.py atb:float64:8:8 ab:float32:24:24 --k 16384,65536 --batch 1,8,64 [--json out.json]

Dispatch picks atb's and ab's kernel (or XLA's dot) by each batch item's K, while
one launch serves all items, so a batch of short items pays the kernels' fixed
cost once, as one item of the batch's total rows does. For each shape
(op:dtype:M:N), K and batch size this times, on the bench's loops and rotating
random operands: ``jax.vmap`` of jax_tsmm's call as dispatched, the same with the
kernel dispatch would choose at K x batch forced (where that is a kernel), and
``jax.vmap`` of XLA's dot at HIGHEST precision.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax

from jax_tsmm import _dispatch, bench

jax.config.update("jax_enable_x64", True)


def time_batch(op: str, dtype: str, m: int, n: int, k: int, batch: int, ceilings: dict) -> dict:
    ours, xla = (jax.vmap(call) for call in bench.operations(op))
    sets = bench.operand_sets(op, dtype, m, n, k, seed=m * 1000 + n + batch, batch=(batch,))
    best = bench.roofline_seconds(op, dtype, m, n, k * batch, ceilings)
    dispatched = bench.timed_kernel(op, dtype, m, n, k)
    by_total = bench.timed_kernel(op, dtype, m, n, k * batch)
    row = {"op": op, "dtype": dtype, "M": m, "N": n, "K": k, "batch": batch,
           "dispatched_config": dataclasses.asdict(dispatched.config) if dispatched else None,
           "total_config": dataclasses.asdict(by_total.config) if by_total else None}
    # The kernel chosen by the batch's total K, where there is one, in the same turns.
    forced = [_dispatch.forced(by_total)] if by_total is not None else []
    row["dispatched_s"], row["xla_s"], *total_s = bench.seconds_per_call_in_turns(
        [ours, xla] + [ours] * len(forced), sets, best, compiled_in=[None, None, *forced])
    if total_s:
        row["total_s"] = total_s[0]
    row["roofline_s"] = best
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N, op atb or ab")
    parser.add_argument("--k", default="16384,65536", help="each batch item's K")
    parser.add_argument("--batch", default="1,8,64")
    parser.add_argument("--json")
    bench.add_loop_seconds_option(parser)
    args = parser.parse_args(argv)
    bench.set_loop_seconds(args.loop_seconds)
    ceilings = bench.measure_ceilings()
    rows = []
    for shape in args.shapes:
        op, dtype, m, n = shape.split(":")
        for k in map(int, args.k.split(",")):
            for batch in map(int, args.batch.split(",")):
                row = time_batch(op, dtype, int(m), int(n), k, batch, ceilings)
                rows.append(row)
                total = (f"by K x batch {row['total_s'] * 1e6:8.1f} µs ({row['xla_s'] / row['total_s']:.2f}x)"
                         if "total_s" in row else "by K x batch: XLA's dot")
                print(f"{shape:20} K={k:8} batch={batch:4}  dispatched "
                      f"{'kernel' if row['dispatched_config'] else 'XLA   '} {row['dispatched_s'] * 1e6:8.1f} µs "
                      f"({row['xla_s'] / row['dispatched_s']:.2f}x)  {total}  xla {row['xla_s'] * 1e6:8.1f} µs "
                      f"({100 * row['roofline_s'] / row['xla_s']:.0f} % of roofline)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
