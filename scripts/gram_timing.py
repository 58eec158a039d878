"""Gram matrices Aᴴ A: one tall operand passed as both of atb's, against two.

    python3 scripts/gram_timing.py float64:8 float64:32 complex128:16 [--json out.json]

Cholesky-QR, block Gram–Schmidt and LOBPCG call ``atb(v, v, conj=True)``, whose
least traffic is one read of V, half of what ``atb(a, b)`` of the same width
moves; jax_tsmm runs it by a kernel that stages V once (``Problem.gram``). For
each dtype:width this times, on the bench's rows (``bench.problem_rows``) and
the bench's loops (``bench.seconds_per_call``), jax_tsmm and XLA's dot (HIGHEST)
on the Gram matrix ``atb(a, a)`` and on two operands ``atb(a, b)``, conjugated
for the complex dtypes (Aᴴ A, Aᴴ B; the bench times Aᵀ B). The Gram rows'
percentages are of the read-once roofline (``bench.roofline_seconds`` of op
"gram": K M elements at the read ceiling, or the FLOP peak where that binds),
the pairs' of the bench's. Where the Gram kernel is atb's carried to one
operand (``codegen.model.carried_to_gram``: no "gram" entry of its own), atb's
kernel is timed on the Gram matrix too as it stages a pair of operands (each
stage of the pair's rows, "pair_stages") and with twice its stages of those rows
("twice_stages"), the triangle as the Gram kernel's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_tsmm
from jax_tsmm import _cuda, _dispatch, bench
from jax_tsmm.codegen import KernelSpec, carried_to_gram
from jax_tsmm.codegen.model import is_valid

jax.config.update("jax_enable_x64", True)


def pair_calls(conj: bool):
    """(jax_tsmm's, XLA's) op(A)ᵀ B of two operands, conjugated with ``conj``."""
    ours = lambda a, b: jax_tsmm.atb(a, b, conj=conj)
    xla = lambda a, b: jnp.matmul((jnp.conj(a) if conj else a).T, b, precision=lax.Precision.HIGHEST)
    return ours, xla


def time_width(dtype, m: int, ceilings: dict) -> dict:
    k = bench.problem_rows(m, m, dtype)
    pair_sets = bench.operand_sets("atb", dtype, m, m, k, seed=m)
    gram_sets = [(a,) for a, _ in pair_sets]
    gram_best = bench.roofline_seconds("gram", dtype, m, m, k, ceilings)
    pair_best = bench.roofline_seconds("atb", dtype, m, m, k, ceilings)
    row = {"dtype": np.dtype(dtype).name, "M": m, "K": k}
    gram_problem = _dispatch.named_problem("gram", row["dtype"], m, m)  # Aᴴ A for a complex dtype
    gram_calls, calls = bench.operations("gram"), pair_calls(gram_problem.conj)
    for library, gram_call, call in zip(("tsmm", "xla"), gram_calls, calls):
        row[f"{library}_gram_s"] = bench.seconds_per_call(gram_call, gram_sets, gram_best)
        row[f"{library}_pair_s"] = bench.seconds_per_call(call, pair_sets, pair_best)
        row[f"{library}_gram_pct"] = 100 * gram_best / row[f"{library}_gram_s"]
        row[f"{library}_pair_pct"] = 100 * pair_best / row[f"{library}_pair_s"]
    # atb's kernel on the Gram matrix, staged as two operands would be, where dispatch carries it.
    arch = _cuda.arch()
    gram = _dispatch.select_problem(gram_problem, k, arch, _cuda.device_kind())
    pair = _dispatch.select_problem(dataclasses.replace(gram_problem, gram=False), k, arch, _cuda.device_kind())
    row["gram_kernel"] = gram and gram.name
    if gram is not None and pair is not None and gram.config == carried_to_gram(gram.problem, pair.config, arch):
        as_pair = dataclasses.replace(pair.config, triangle=gram.config.triangle)
        for name, config in (("pair_stages", as_pair),
                             ("twice_stages", dataclasses.replace(as_pair, stages=2 * as_pair.stages))):
            spec = KernelSpec(gram.problem, config)
            if config == gram.config or not is_valid(spec):
                continue
            with _dispatch.forced(spec):
                row[f"tsmm_gram_{name}_s"] = bench.seconds_per_call(gram_calls[0], gram_sets, gram_best)
            row[f"tsmm_gram_{name}_pct"] = 100 * gram_best / row[f"tsmm_gram_{name}_s"]
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="+", help="dtype:M")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    ceilings = bench.measure_ceilings()
    print(f"{jax.devices()[0].device_kind}: read {ceilings['read_bytes_per_s'] / 1e9:.0f} GB/s", flush=True)
    rows = []
    for shape in args.shapes:
        dtype, m = shape.split(":")
        row = time_width(np.dtype(dtype), int(m), ceilings)
        rows.append(row)
        print(f"{row['dtype']:>10} {row['M']:>3} K={row['K']:>10}  " + "   ".join(
            f"{library} gram {row[f'{library}_gram_s'] * 1e3:7.3f} ms {row[f'{library}_gram_pct']:5.1f} %, "
            f"pair {row[f'{library}_pair_s'] * 1e3:7.3f} ms {row[f'{library}_pair_pct']:5.1f} %"
            for library in ("tsmm", "xla")) + f"   gram: x{row['xla_gram_s'] / row['tsmm_gram_s']:.2f} XLA"
            + "".join(f"; {name.replace('_', ' ')} {row[f'tsmm_gram_{name}_pct']:5.1f} %"
                      for name in ("pair_stages", "twice_stages") if f"tsmm_gram_{name}_s" in row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": jax.devices()[0].device_kind, "ceilings": ceilings, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
