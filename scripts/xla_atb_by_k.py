"""XLA's Aᵀ B (cuBLAS) and jax_tsmm's, as dispatched, at several K; or one jitted
call of XLA's dot between cudaProfilerStart and Stop, for Nsight Compute.

    python3 scripts/xla_atb_by_k.py complex128:57:b,1177344,2097152 complex128:59:b,1048576
    ncu --profile-from-start off --clock-control none --section SpeedOfLight ... \
        python3 scripts/xla_atb_by_k.py --profile complex128:57:4194304

Each argument is dtype:M:K,K,... (M = N; "b" is the bench's K), timed with the
bench's loops on the bench's operands, as percentages of the bench's roofline
(``bench.measure_ceilings``). XLA's dot runs its fast kernels only where it
does not pad K first (performance.md, fortieth round).
"""

from __future__ import annotations

import argparse

import jax

from jax_tsmm import bench

jax.config.update("jax_enable_x64", True)


def time_rows(dtype: str, m: int, ks: list[int], ceilings: dict) -> None:
    ours, xla = bench.operations("atb")
    for k in ks:
        sets = bench.operand_sets("atb", dtype, m, m, k, m * 1000 + m)
        best = bench.roofline_seconds("atb", dtype, m, m, k, ceilings)
        xla_s, ours_s = bench.seconds_per_call_in_turns([xla, ours], sets, best)
        del sets
        aligned = "pow2" if k & (k - 1) == 0 else f"{k % 4096} mod 4096"
        print(f"{dtype} {m} K={k:9d} ({aligned}): xla {100 * best / xla_s:5.1f} %  ours {100 * best / ours_s:5.1f} %  "
              f"({1e3 * xla_s:.3f} / {1e3 * ours_s:.3f} ms)", flush=True)


def profile(dtype: str, m: int, k: int) -> None:
    import cupy

    _, xla = bench.operations("atb")
    (a, b), *_ = bench.operand_sets("atb", dtype, m, m, k, 7)
    call = jax.jit(xla).lower(a, b).compile()
    jax.block_until_ready(call(a, b))  # XLA's autotuning and the first run stay outside the profile
    cupy.cuda.runtime.profilerStart()
    jax.block_until_ready(call(a, b))
    cupy.cuda.runtime.profilerStop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="+", help="dtype:M:K,K,... (b: the bench's K); with --profile dtype:M:K")
    parser.add_argument("--profile", action="store_true", help="one call of XLA's dot for ncu --profile-from-start off")
    args = parser.parse_args()
    if args.profile:
        dtype, m, k = args.rows[0].split(":")
        profile(dtype, int(m), int(k))
        return
    ceilings = bench.measure_ceilings()
    for row in args.rows:
        dtype, m, ks = row.split(":")
        time_rows(dtype, int(m), [bench.problem_rows(int(m), int(m), dtype) if k == "b" else int(k)
                                  for k in ks.split(",")], ceilings)


if __name__ == "__main__":
    main()
