"""The bench's figures against the plainest timing a user would write.

    python3 scripts/jit_timing.py atb:float64:13:13 ab:float64:13:13 [--calls 40] [--rounds 4] [--k K] [--json out.json]

Issue 4 is checked by running the bench together with "an independent timing of
the same calls through jax.jit". For each shape (op:dtype:M:N, op atb or ab) this
times jax_tsmm and XLA's dot (``bench.operations``) on the bench's operands in
two ways: the bench's (``bench.seconds_per_call``: the difference of two jitted
loops) and the plain one, ``jax.jit`` of a single call, ``--calls`` calls back
to back over the same rotating sets, the host clock around them and one
``block_until_ready`` after the last. The plain way counts each call's dispatch
from Python (a few µs) and its output's allocation, which the loop leaves out.
The two ways take turns over ``--rounds`` rounds, each first in every other
round: under the H200's power cap the clock a timing meets depends on what ran
just before (docs/performance.md, twenty-first round), so a fixed order would
favour one. Prints the median of each way and their ratio for each library.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from jax_tsmm import bench

jax.config.update("jax_enable_x64", True)


def plain_seconds(call, operand_sets: list[tuple], calls: int) -> float:
    """Seconds per call of ``jax.jit(call)`` issued ``calls`` times back to back."""
    jitted = jax.jit(call)
    jax.block_until_ready([jitted(*operands) for operands in operand_sets])  # compile, warm up
    start = time.perf_counter()
    for i in range(calls):
        out = jitted(*operand_sets[i % len(operand_sets)])
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls


def compare(op: str, dtype, m: int, n: int, k: int, calls: int, rounds: int) -> dict:
    sets = bench.operand_sets(op, dtype, m, n, k, seed=m * 1000 + n + 1)
    times = {}
    for library, call in zip(("tsmm", "xla"), bench.operations(op)):
        # The loop's length is set by the expected time per call; a plain timing of one call is it.
        expected = plain_seconds(call, sets, calls)
        ways = {"plain_s": lambda: plain_seconds(call, sets, calls),
                "loop_s": lambda: bench.seconds_per_call(call, sets, expected)}
        runs = {way: [] for way in ways}
        for turn in range(rounds):
            for way in (list(ways) if turn % 2 == 0 else list(ways)[::-1]):
                runs[way].append(ways[way]())
        times[library] = {**{way: float(np.median(seconds)) for way, seconds in runs.items()},
                          **{way.replace("_s", "_runs_s"): seconds for way, seconds in runs.items()}}
    return {"op": op, "dtype": np.dtype(dtype).name, "M": m, "N": n, "K": k, **times}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N, op atb or ab")
    parser.add_argument("--calls", type=int, default=40, help="calls of the plain timing")
    parser.add_argument("--rounds", type=int, default=4, help="turns of the two ways, each first in every other")
    parser.add_argument("--k", type=int, default=None, help="rows (default: the bench's, bench.problem_rows)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for shape in args.shapes:
        op, dtype, m, n = shape.split(":")
        dtype, m, n = np.dtype(dtype), int(m), int(n)
        row = compare(op, dtype, m, n, args.k or bench.problem_rows(m, n, dtype), args.calls, args.rounds)
        rows.append(row)
        print(f"{op:>4} {row['dtype']:>10} {m:>3}x{n:<3} K={row['K']:>10}  " + "   ".join(
            f"{library} plain {t['plain_s'] * 1e3:8.3f} ms, loop {t['loop_s'] * 1e3:8.3f} ms "
            f"(x{t['plain_s'] / t['loop_s']:.3f})" for library, t in (("tsmm", row["tsmm"]), ("xla", row["xla"]))),
            flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "jax": jax.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
