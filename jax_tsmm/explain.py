"""Which kernel, or XLA's dot, a call lowers to on the GPU, and why.

    python -m jax_tsmm.explain ab float64 30 1 --k 10000000
    python -m jax_tsmm.explain atb complex64 16 16 --k 4194304 --conj --device "NVIDIA H200"
    python -m jax_tsmm.explain mtsm float32 16384 16 --k 16384 --transpose-a

M and N are the widths of atb's A (K x M) and B (K x N) and of ab's A (K x M) and
C (M x N); for mtsm, A is M x K (K x M with --transpose-a) and X is K x N. The
choice is dispatch's (``_dispatch.choose``, ``_mtsm.choose``) for this machine's
GPU, or for the GPU model named by --device (its own tuning file over the
architecture's; "" for the architecture's alone), so it also runs without a GPU.
Lowering takes XLA's dot as well where no kernel can run: no CUDA GPU with the
extension's targets, no nvcc for a kernel outside the prebuilt set (with a
warning), more batch axes than a kernel takes, or mtsm's batch shapes that differ.
"""

from __future__ import annotations

import argparse
import dataclasses

from jax_tsmm import _cuda, _dispatch, _kernels, _mtsm, bench
from jax_tsmm.codegen import KernelSpec


def explain(op: str, dtype: str, m: int, n: int, k: int, *, conj: bool = False, update: bool = False,
            gram: bool = False, transpose_a: bool = False, batch: int = 1, device: str | None = None,
            arch: str | None = None) -> str:
    """One line: the problem, then the kernel (its name and kind) or XLA's dot, and the reason."""
    arch = arch or _cuda.arch()
    device = _cuda.device_kind() if device is None else device
    if op == "mtsm":
        size = _mtsm.problem_size(batch, m, k)
        choice = _mtsm.choose(dtype, transpose_a, n, conj, size, arch, device)
        shape = f"{'Aᵀ' if transpose_a else 'A'} X, A {'%d x %d' % ((k, m) if transpose_a else (m, k))}, N = {n}"
    else:
        choice = _dispatch.choose(op, dtype, m, n, k, 0 if batch == 1 else 1, conj, arch, device, update=update,
                                  gram=gram)
        shape = f"{'ab (fused update)' if update else 'atb (Gram matrix)' if gram else op} {m} x {n}, K = {k:,}"
    where = f"{device} ({arch})" if device else f"{arch} (the architecture's database)"
    return f"{shape}, {dtype}, on {where}: {_served_by(choice.spec, dtype)}. Why: {choice.reason}."


def _served_by(spec, dtype: str) -> str:
    if spec is None:
        return "XLA's dot"
    real_view = isinstance(spec, KernelSpec) and _dispatch.is_real_view(spec, dtype)
    kind = bench.kernel_label({"config": dataclasses.asdict(spec.config), "real_view": real_view})
    return f"kernel {spec.name} ({kind}; {_origin(spec)})"


def _origin(spec) -> str:
    """Built in, a kernel needs no nvcc and no compile at first use; otherwise this
    machine's nvcc compiles it, and without one XLA's dot serves (_kernels.runnable)."""
    if spec.name in _kernels.prebuilt_names():
        return "built into the extension"
    try:
        return f"compiled at first use by {_kernels.nvcc()}"
    except _kernels.NvccNotFound:
        return "compiled at first use, but no nvcc is found here: XLA's dot serves it until one is"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", choices=["atb", "ab", "mtsm"])
    parser.add_argument("dtype", choices=list(_dispatch.KERNEL_DTYPES))
    parser.add_argument("m", type=int, help="M: A's width (atb, ab), the rows of the result (mtsm)")
    parser.add_argument("n", type=int, help="N: B's, C's or X's width")
    parser.add_argument("--k", type=int, required=True, help="K: the long axis (atb, ab), the inner dimension (mtsm)")
    parser.add_argument("--conj", action="store_true")
    parser.add_argument("--update", action="store_true", help="ab's fused update (ab with out=, beta != 0)")
    parser.add_argument("--gram", action="store_true", help="atb of one value passed as both operands (M = N)")
    parser.add_argument("--transpose-a", action="store_true", help="mtsm's Aᵀ X")
    parser.add_argument("--batch", type=int, default=1, help="batch items (one batch axis)")
    parser.add_argument("--device", default=None,
                        help='GPU model as JAX names it, e.g. "NVIDIA H200" (default: this machine\'s GPU)')
    parser.add_argument("--arch", default=None, help="e.g. sm_90 (default: this machine's GPU's)")
    args = parser.parse_args(argv)
    print(explain(args.op, args.dtype, args.m, args.n, args.k, conj=args.conj, update=args.update,
                  gram=args.gram, transpose_a=args.transpose_a, batch=args.batch, device=args.device, arch=args.arch))


if __name__ == "__main__":
    main()
