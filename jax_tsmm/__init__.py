"""Tall & skinny matrix products for JAX.

``atb(a, b, conj=False)``: Aᵀ B (or Aᴴ B), reduced over the long axis.
``ab(a, c, out=None, alpha=1, beta=0)``: A C with a small C (beta * out + alpha * A C).
``mtsm(a, x, transpose_a=False, conj=False)``: a large dense A (or Aᵀ) times a tall & skinny X.
``linalg``: block Gram–Schmidt and Cholesky-QR built on them.
"""

from jax_tsmm._api import ab, atb
from jax_tsmm._mtsm import mtsm
from jax_tsmm import _cuda  # noqa: F401  (registers the CUDA lowering)
from jax_tsmm import linalg

__all__ = ["ab", "atb", "linalg", "mtsm"]
__version__ = "0.1.0"
