"""A sample of kernels for compute-sanitizer: each op and dtype, odd and even
shapes, ragged K, broadcast batches. Checks results too, so a run that passes
the sanitizer but computes garbage still fails."""

import itertools

import jax
import numpy as np

import jax_tsmm

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng()


def random(shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


CASES = list(zip(
    itertools.product(("atb", "ab"), ("float32", "float64", "complex64", "complex128")),
    itertools.cycle([(3, 5), (8, 8), (13, 2), (1, 1)]),
    itertools.cycle([1001, 33, 4099]),
)) + [
    (("atb", "float64"), (24, 20), 1003),  # FP64 tensor cores
    (("atb", "complex128"), (100, 90), 37),  # result split into panels
]
for (op, dtype), (m, n), k in CASES:
    a = random((2, k, m), dtype)
    b = random((1, k, n) if op == "atb" else (1, m, n), dtype)
    if op == "atb":
        got = jax_tsmm.atb(a, b, conj=True)
        want = np.conj(a).swapaxes(-1, -2) @ b
    else:
        got = jax_tsmm.ab(a, b)
        want = a @ b
    err = np.abs(np.asarray(got) - want).max() / np.abs(want).max()
    print(f"{op} {dtype} {m}x{n} K={k}: relative error {err:.1e}", flush=True)
    assert err < 1e-4, err
print("sample done")
