"""Copy the kernels a run uses out of a large kernel cache into a small one, to carry.

    python scripts/cache_subset.py --from .tsmm_cache_all --to .tsmm_cache -- \
        jax_tsmm.tune --compile-only --ops ab --dtypes float64 --shapes 32x3,24x3 --candidates 8

runs ``python -m MODULE ARGS`` (or ``python SCRIPT.py ARGS``) with
JAX_TSMM_CACHE_DIR at --from, compiling what is missing there, and copies every
cubin it asked for into --to; runs add to it.
A device call carries at most 64 MiB of the checkout, which the documentation's
logs and a cache of every kernel compiled here outgrow.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import runpy
import shutil
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=pathlib.Path, required=True, help="the large cache")
    parser.add_argument("--to", dest="target", type=pathlib.Path, required=True, help="the cache to carry")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- MODULE ARGS...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.environ["JAX_TSMM_CACHE_DIR"] = str(args.source)

    from jax_tsmm import _kernels

    used = []
    compile_module = _kernels.compile_module

    def recording(specs, arch):
        path = compile_module(specs, arch)
        used.append(path)
        return path

    _kernels.compile_module = recording
    sys.argv = command
    try:
        if command[0].endswith(".py"):
            runpy.run_path(command[0], run_name="__main__")
        else:
            runpy.run_module(command[0], run_name="__main__")
    finally:
        args.target.mkdir(parents=True, exist_ok=True)
        for path in dict.fromkeys(used):
            shutil.copy2(path, args.target / path.name)
        size = sum(p.stat().st_size for p in args.target.iterdir())
        print(f"{len(set(used))} kernels copied into {args.target} ({size / 2**20:.1f} MiB there)")


if __name__ == "__main__":
    main()
