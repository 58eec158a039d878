"""The instruction mix of kernels' inner loops, compiled here: no GPU needed.

    python3 scripts/sass_mix.py atb:complex128:64:64 ab:complex128:63:63 --device "NVIDIA H200"
    python3 scripts/sass_mix.py atb:float64:58:58 --model --dump /tmp/sass

For each shape (op:dtype:M:N, op atb, ab or ab_update) the kernel a bench row of
it runs (``bench.timed_kernel`` at the bench's K; ``--model``: the generator's model
kernel; ``--device``: the dispatch of that GPU model, "" for the architecture's
database alone) is compiled as the package compiles it (sm_90 on a machine without
a GPU) with ``-Xptxas -v`` and disassembled by ``cuobjdump -sass``.
Printed: registers and spills, then the instructions between the first and the
last of each half of the kernel's tensor-core or FMA instructions. The generator
writes a kernel's inner step twice, for full chunks (or passes) and for the
last, partial one, so the halves are those two copies; the one with no
predicated instructions is the full chunks' loop, where the time goes. The
predict-change-measure step's first half: read the mix before timing.

``--candidates N`` reports instead the search's first N candidates for each shape
(``codegen.search.candidates``), compiled together with ``-Xptxas -v``: per kernel
its threads, the register estimate, what it needs under a launch bound
(``KernelSpec.bounded_registers``), the bound, and ptxas's registers and spills:
how the search's pruning by registers compares with the compiler's.

    python3 scripts/sass_mix.py atb:complex128:50:50 --candidates 16

Needs nvcc (found as the package finds it) and cuobjdump on PATH, with the nvdisasm
it runs (neither for ``--candidates``). Where the CUDA toolkit has neither (this
repository's CPU machine), PyPI's wheels carry them:
``pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm``, unzip both and
put their ``nvidia/cu13/bin`` on PATH.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import subprocess
import tempfile

from jax_tsmm import _cuda, _dispatch, _kernels, bench
from jax_tsmm.codegen import KernelSpec, search

# The instructions that do a kernel's arithmetic, in order of preference: the first
# kind a kernel has marks its inner step.
STEP_INSTRUCTIONS = ("DMMA", "HMMA", "DFMA", "FFMA")


def parse_shape(shape: str) -> tuple[str, str, int, int]:
    """op:dtype:M:N as (op, dtype, M, N)."""
    op, dtype, m, n = shape.split(":")
    return op, dtype, int(m), int(n)


def kernel_of(shape: str, model: bool, device: str):
    op, dtype, m, n = parse_shape(shape)
    with bench.dispatch_context(model):
        return bench.timed_kernel(op, dtype, m, n, bench.problem_rows(m, n, dtype), device)


def instructions(sass: str) -> list[str]:
    """The opcodes (with their predicate, if any) of a cuobjdump listing, in order."""
    found = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+([^;]*);", sass, re.M)
    return [" ".join(line.split()[:2]) if line.startswith("@") else line.split()[0] for line in found]


def halves(opcodes: list[str]) -> tuple[str, list[list[str]]]:
    """The kind of step instruction and the stretches from the first to the last
    of each half of them."""
    for kind in STEP_INSTRUCTIONS:
        steps = [i for i, op in enumerate(opcodes) if op.split()[-1].startswith(kind)]
        if steps:
            half = len(steps) // 2
            return kind, [opcodes[steps[0]:steps[half - 1] + 1], opcodes[steps[half]:steps[-1] + 1]]
    return "", []


def report(shape: str, spec, work: pathlib.Path) -> str:
    if spec is None:
        return f"{shape}: XLA's dot"
    cubin, built = _kernels.compile_with_report([spec], _cuda.arch(), work / f"{spec.name}.cu")
    usage = "; ".join(f"{name}: {regs} registers, {spills} bytes spilled"
                      for name, (regs, spills) in _kernels.ptxas_usage(built).items())
    sass = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    cubin.with_suffix(".sass").write_text(sass)
    kind, parts = halves(instructions(sass))
    lines = [f"{shape}: {spec.name}", f"  {usage}"]
    for label, part in zip(("first copy", "second copy"), parts):
        ops = collections.Counter(op.split()[-1] for op in part)
        predicated = sum(op.startswith("@") for op in part)
        steps = sum(count for op, count in ops.items() if op.startswith(kind))
        mix = ", ".join(f"{op} {count}" for op, count in ops.most_common(12))
        lines.append(f"  {label}: {len(part)} instructions for {steps} {kind} ({len(part) / steps:.2f} each), "
                     f"{predicated} predicated: {mix}")
    return "\n".join(lines)


def candidates_report(shape: str, limit: int, work: pathlib.Path) -> str:
    """The search's first ``limit`` candidates for ``shape``: registers by the
    estimate, under a bound and by ptxas (at the bound their launch bounds set)."""
    problem = _dispatch.named_problem(*parse_shape(shape))
    specs = [KernelSpec(problem, c) for c in search.candidates(problem, limit, _cuda.arch())]
    _, built = _kernels.compile_with_report(specs, _cuda.arch(), work / f"candidates-{shape.replace(':', '-')}.cu")
    usage = _kernels.ptxas_usage(built)
    lines = [f"{shape}: the search's first {len(specs)} candidates"]
    for spec in specs:
        c = spec.config
        registers, spilled = usage[spec.name]
        bound = search.launch_bound_registers(spec.threads, c.blocks_per_sm)
        lines.append(f"  {spec.name} ({c.tile_m}x{c.tile_n}, row groups {c.row_groups}, {c.stages} stages of "
                     f"{c.rows_per_stage} rows, {c.stage_copy}, {c.blocks_per_sm} per SM"
                     + "".join(f", {flag}" for flag in ("mma", "tf32x3", "wgmma", "gauss", "fma_edges", "lone_transposed")
                               if getattr(c, flag))
                     + f"): {spec.threads} threads, estimate {spec.estimated_registers()}, under a bound "
                     f"{spec.bounded_registers()}, bound {bound}; ptxas {registers} registers, {spilled} bytes spilled")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", help="op:dtype:M:N, op in atb, ab, ab_update")
    parser.add_argument("--model", action="store_true", help="the model's kernels, ignoring the tuning database")
    parser.add_argument("--device", default="", help='the GPU model whose dispatch picks (e.g. "NVIDIA H200")')
    parser.add_argument("--dump", help="a directory for the sources, cubins and SASS listings (else temporary)")
    parser.add_argument("--candidates", type=int, default=0,
                        help="the search's first N candidates instead: registers by the estimate and by ptxas")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = pathlib.Path(args.dump or scratch)
        work.mkdir(parents=True, exist_ok=True)
        for shape in args.shapes:
            if args.candidates:
                print(candidates_report(shape, args.candidates, work), flush=True)
            else:
                print(report(shape, kernel_of(shape, args.model, args.device), work), flush=True)


if __name__ == "__main__":
    main()
