"""The SM clock, power and clock-event reasons while one shape runs for seconds.

    python3 scripts/clocks_under_load.py atb:float32:48:48 atb:float32:61:61 [--xla] [--seconds 3] [--json out.json]
    python3 scripts/clocks_under_load.py mtsm:float64:16384:32@k_steps=8,stages=4 --xla

The bench times each shape in loops of about 20 ms; a solver calls it for
seconds. For each shape (op:dtype:M:N, op atb or ab; mtsm[_t]:dtype:SIZE:N, M = K =
SIZE, with configuration fields after an ``@`` as scripts/profile_kernels.py takes them)
this runs the kernel dispatch picks (and with ``--xla`` then XLA's dot) on the bench's
inputs (tall matrices of 1 GiB, two rotating sets; mtsm's the tuner's; fresh random
values) in back-to-back loops of about
100 ms for ``--seconds``, timing each loop, while a thread samples
``nvidia-smi`` (reading only: the clocks are left as they are). It prints,
per shape, the % of roofline of the first loop, the median and the last, and
the SM clock, power draw and temperature over the run with the clock-event
reasons seen (power cap, thermal, ...). Tensor-bound kernels slow down with
the SM clock; memory-bound ones hardly do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import threading
import time

import jax

from jax_tsmm import _dispatch, bench
from jax_tsmm.codegen.mtsm import MtsmProblem
from profile_kernels import mtsm_override

jax.config.update("jax_enable_x64", True)


def smi(query: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True)


def sample_query() -> str:
    """The fields sample_forever reads; older drivers name the reasons clocks_throttle_reasons."""
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        if smi(reasons).returncode == 0:
            return f"clocks.sm,power.draw,temperature.gpu,{reasons}"
    raise SystemExit("nvidia-smi reports no clock-event reasons")


def sample_forever(query: str, samples: list, stop: threading.Event) -> None:
    """Append (time, SM MHz, watts, degrees C, event-reason bits) about every 50 ms."""
    while not stop.is_set():
        line = smi(query).stdout.strip().splitlines()[0]
        clock, watts, degrees, reasons = (field.strip() for field in line.split(","))
        samples.append((time.perf_counter(), float(clock), float(watts), float(degrees), int(reasons, 16)))
        stop.wait(0.05)


# nvidia-smi's clock-event reason bits (nvml's nvmlClocksEventReasons)
REASONS = {0x1: "idle", 0x4: "sw power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal",
           0x80: "hw power brake"}


def run_shape(shape: str, xla: bool, seconds: float, ceilings: dict, query: str) -> dict:
    dims, _, overrides = shape.partition("@")
    op, dtype, m, n = dims.split(":")
    m, n = int(m), int(n)
    forced = None
    if op in bench.MTSM_OPS:
        k = m
        sets = bench.mtsm_operand_sets(dtype, m, k, n, seed=m, transpose_a=op == "mtsm_t")
        ours, xla_dot = bench.mtsm_operations(op == "mtsm_t")
        best = bench.mtsm_roofline_seconds(dtype, m, n, k, ceilings)
        if overrides:
            forced = mtsm_override(MtsmProblem(op == "mtsm_t", dtype, n), overrides)
    else:
        k = bench.problem_rows(m, n, dtype)
        sets = bench.operand_sets(op, dtype, m, n, k, seed=m * 1000 + n)
        ours, xla_dot = bench.operations(op)
        best = bench.roofline_seconds(op, dtype, m, n, k, ceilings)
    trips = max(2, round(0.1 / best / len(sets)))
    loop = bench._timed_loop(xla_dot if xla else ours, sets, updates_last=False)
    with _dispatch.forced(forced) if forced and not xla else contextlib.nullcontext():
        jax.block_until_ready(loop(1))  # compile (the forced kernel, if any), warm up
    samples, stop = [], threading.Event()
    sampler = threading.Thread(target=sample_forever, args=(query, samples, stop))
    sampler.start()
    time.sleep(0.3)  # the clocks at rest
    start = time.perf_counter()
    loops = []
    while time.perf_counter() - start < seconds:
        begin = time.perf_counter()
        jax.block_until_ready(loop(trips))
        loops.append((begin, time.perf_counter()))
    stop.set()
    sampler.join()
    loaded = [s for s in samples if s[0] >= start]
    pct = [100 * best * trips * len(sets) / (end - begin) for begin, end in loops]
    reasons = 0
    for s in loaded:
        reasons |= s[4]
    row = {
        "shape": shape, "library": "xla" if xla else "jax_tsmm", "K": k, "loops": len(loops),
        "pct_first": pct[0], "pct_median": statistics.median(pct), "pct_last": pct[-1],
        "rest_mhz": [s[1] for s in samples if s[0] < start][-1:],
        "mhz": [s[1] for s in loaded], "watts": [s[2] for s in loaded], "celsius": [s[3] for s in loaded],
        "reasons": [name for bit, name in REASONS.items() if reasons & bit],
    }
    print(f"{shape} {row['library']}: % of roofline first {row['pct_first']:.1f} median {row['pct_median']:.1f} "
          f"last {row['pct_last']:.1f} ({len(loops)} loops); SM MHz at rest {row['rest_mhz']}, loaded "
          f"min {min(row['mhz']):.0f} median {statistics.median(row['mhz']):.0f} max {max(row['mhz']):.0f}; "
          f"W median {statistics.median(row['watts']):.0f} max {max(row['watts']):.0f}; "
          f"C max {max(row['celsius']):.0f}; reasons {row['reasons'] or 'none'}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N, op atb or ab; mtsm[_t]:dtype:SIZE:N[@FIELD=V,...]")
    parser.add_argument("--xla", action="store_true", help="XLA's dot as well, after each shape")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each shape runs")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,power.limit", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip(), flush=True)
    query = sample_query()
    ceilings = bench.measure_ceilings()
    rows = []
    for shape in args.shapes:
        rows.append(run_shape(shape, False, args.seconds, ceilings, query))
        if args.xla:
            rows.append(run_shape(shape, True, args.seconds, ceilings, query))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "ceilings": ceilings, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
