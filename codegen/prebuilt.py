"""The prebuilt kernel set, and the build step that writes it for CMake.

    python -m codegen.prebuilt --out-dir DIR [--tuning jax_tsmm/tuning/sm_90*.json --arch sm_90]

writes tsmm_args.h, mtsm_args.h, prebuilt_kernels.h, prebuilt_registry.cu,
prebuilt_0.cu .. prebuilt_{SHARDS-1}.cu and prebuilt_mtsm_0.cu ..
prebuilt_mtsm_{MTSM_SHARDS-1}.cu (fixed counts, so CMake knows the files
before running this and compiles the shards in parallel), and
prebuilt_sm90a.cu and prebuilt_mtsm_sm90a.cu, the kernels that run on sm_90a
code alone (wgmma), which CMake compiles apart for that target. Shapes outside
this set are generated and compiled at run time. With ``--tuning`` (the
databases of the architecture the extension is built for, sm_90) the set also
holds the kernels those databases choose for its problems, which dispatch picks
there over the model's, and with ``--arch sm_90`` the Gram kernels carried as
dispatch carries them there; without them the sm_90a files hold no kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

from . import mtsm
from .abi import header
from .emit import module_source
from .model import carried_to_gram, default_config
from .spec import Config, KernelSpec, Problem, problem_key

SHARDS = 8
MTSM_SHARDS = 4

# The widths block methods use most: powers of two, for the common dtypes.
PREBUILT_WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def prebuilt_problems() -> list[Problem]:
    problems = [
        Problem(op, dtype, width, width)
        for op in ("atb", "ab")
        for dtype in ("float64", "float32")
        for width in PREBUILT_WIDTHS
    ]
    # Gram-Schmidt: complex inner products Qᴴ V, and the fused updates V - Q C.
    # complex128 from 8 runs as its real view, the float64 kernels of twice the
    # widths (atb above; the updates here serve complex128 blocks of 4 to 32).
    problems += [Problem("atb", "complex128", 4, 4, conj=True)]
    problems += [Problem("ab", "float64", w, w, update=True) for w in (8, 16, 32, 64)]
    return problems


def prebuilt_specs(databases: tuple[dict, ...] = (), arch: str = "") -> list[KernelSpec]:
    """The model's kernel of each prebuilt problem (for any architecture from sm_80),
    then those the tuning ``databases`` (each file's ``entries``) choose for the
    problems themselves, at any K range, wgmma's (sm_90a) among them. Left out:
    entries that run a complex problem on its real view (their problem is
    another). On an H100 or H200 the shipped databases choose other kernels than
    the model's for many of these problems (28 kernels besides wgmma's in those of
    2026-11-29, 5 wgmma kernels in those of 2026-11-30), which would otherwise
    compile at first use, or without nvcc leave those calls to XLA's dot.
    Each square atb kernel comes with its Gram matrix's twin (``Problem.gram``,
    ``carried_to_gram`` as on GPUs of ``arch``), which dispatch picks where one value
    is passed as both operands and the databases have no "gram" entries, and so do
    the kernels those entries choose."""
    problems = prebuilt_problems()
    specs = [KernelSpec(p, default_config(p)) for p in problems]
    for problem in problems:
        specs += _tuned_specs(problem, databases)
    grams = [(s, dataclasses.replace(s.problem, gram=True)) for s in specs
             if s.problem.op == "atb" and s.problem.m == s.problem.n]
    specs += [KernelSpec(gram, carried_to_gram(gram, s.config, arch)) for s, gram in grams]
    for gram in dict.fromkeys(gram for _, gram in grams):
        specs += _tuned_specs(gram, databases)
    return _one_per_name(specs)


def _tuned_specs(problem: Problem, databases: tuple[dict, ...]) -> list[KernelSpec]:
    """The kernels the ``databases``' entries of ``problem``'s key choose for the
    problem itself, at any K range (not XLA's dot, not a real view's)."""
    return [KernelSpec(problem, Config(**entry["config"])) for entries in databases
            for entry in entries.get(problem_key(problem), [])
            if entry["config"] is not None and not entry.get("real_view", False)]


def prebuilt_mtsm_problems() -> list[mtsm.MtsmProblem]:
    """mtsm at the same widths, both layouts of A, the real dtypes: the problems the
    tuner times (the databases' mtsm keys)."""
    return [mtsm.MtsmProblem(transpose_a, dtype, width)
            for transpose_a in (False, True)
            for dtype in ("float64", "float32")
            for width in PREBUILT_WIDTHS]


def prebuilt_mtsm_specs(databases: tuple[dict, ...] = ()) -> list[mtsm.MtsmSpec]:
    """As ``prebuilt_specs``, for mtsm: the model's kernel of each prebuilt mtsm
    problem, then those the ``databases`` choose for it at any size."""
    problems = prebuilt_mtsm_problems()
    specs = [mtsm.MtsmSpec(p, mtsm.default_config(p)) for p in problems]
    for problem in problems:
        for entries in databases:
            for entry in entries.get(mtsm.mtsm_key(problem.transpose_a, problem.dtype, problem.n), []):
                if entry["config"] is not None:
                    specs.append(mtsm.MtsmSpec(problem, mtsm.MtsmConfig(**entry["config"])))
    return _one_per_name(specs)


def _one_per_name(specs: list) -> list:
    """``specs`` in order, the first of each kernel name (configurations that differ in
    launch parameters alone share a kernel)."""
    by_name = {}
    for spec in specs:
        by_name.setdefault(spec.name, spec)
    return list(by_name.values())


def by_target(specs: list) -> tuple[list, list]:
    """``specs`` as the build compiles them: those for any architecture from sm_80 (the
    extension's target), and those for sm_90a alone (wgmma), compiled apart."""
    return [s for s in specs if not s.arch_specific], [s for s in specs if s.arch_specific]


def _registry(specs: list[KernelSpec], mtsm_specs: list[mtsm.MtsmSpec]) -> str:
    """Every prebuilt kernel's entry points by name; mtsm kernels, like atb's, have a
    finalize."""
    lines = ['#include "prebuilt_kernels.h"', '#include "mtsm_args.h"', ""]
    finalized = {spec.name for spec in specs if spec.problem.op == "atb"} | {spec.name for spec in mtsm_specs}
    for names, args in (([s.name for s in specs], "TsmmArgs"), ([s.name for s in mtsm_specs], "TsmmMtsmArgs")):
        for name in names:
            lines.append(f'extern "C" __global__ void {name}({args} args);')
            if name in finalized:
                lines.append(f'extern "C" __global__ void {name}_finalize({args} args);')
    lines += ["", "const TsmmPrebuilt kTsmmPrebuilt[] = {"]
    names = [s.name for s in specs] + [s.name for s in mtsm_specs]
    for name in names:
        finalize = f"(const void*){name}_finalize" if name in finalized else "nullptr"
        lines.append(f'    {{"{name}", (const void*){name}, {finalize}}},')
    lines += ["};", f"const int kTsmmPrebuiltCount = {len(names)};", ""]
    return "\n".join(lines)


_PREBUILT_HEADER = """\
// Generated by codegen/prebuilt.py; do not edit.
#pragma once
#include "tsmm_args.h"

// A kernel compiled into the extension: its symbol and entry points
// (finalize is null for ab, which needs no second reduction stage).
struct TsmmPrebuilt {
  const char* name;
  const void* kernel;
  const void* finalize;
};
extern const TsmmPrebuilt kTsmmPrebuilt[];
extern const int kTsmmPrebuiltCount;
"""


def write(out_dir: pathlib.Path, databases: tuple[dict, ...] = (), arch: str = "") -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    specs, mtsm_specs = prebuilt_specs(databases, arch), prebuilt_mtsm_specs(databases)
    (specs_any, specs_sm90a), (mtsm_any, mtsm_sm90a) = by_target(specs), by_target(mtsm_specs)
    files = {
        "tsmm_args.h": header(),
        "mtsm_args.h": mtsm.header(),
        "prebuilt_kernels.h": _PREBUILT_HEADER,
        "prebuilt_registry.cu": _registry(specs, mtsm_specs),
    }
    for shard in range(SHARDS):
        files[f"prebuilt_{shard}.cu"] = module_source(specs_any[shard::SHARDS])
    for shard in range(MTSM_SHARDS):
        files[f"prebuilt_mtsm_{shard}.cu"] = mtsm.module_source(mtsm_any[shard::MTSM_SHARDS])
    files["prebuilt_sm90a.cu"] = module_source(specs_sm90a)
    files["prebuilt_mtsm_sm90a.cu"] = mtsm.module_source(mtsm_sm90a)
    for name, text in files.items():
        path = out_dir / name
        # Rewrite only what changed, so an unchanged generator triggers no recompilation.
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=pathlib.Path, required=True)
    parser.add_argument("--tuning", type=pathlib.Path, nargs="*", default=[],
                        help="tuning databases of the architecture built for, whose kernels join the set")
    parser.add_argument("--arch", default="",
                        help="the architecture built for, e.g. sm_90, whose Gram kernels are carried as its "
                             "dispatch carries them (empty: any from sm_80)")
    args = parser.parse_args()
    write(args.out_dir, tuple(json.loads(path.read_text())["entries"] for path in args.tuning), args.arch)


if __name__ == "__main__":
    main()
