"""Tall & skinny matrix products for JAX.

``atb(a, b, conj=False)``: Aᵀ B (or Aᴴ B), reduced over the long axis.
``ab(a, c)``: A C with a small C.
"""

from jax_tsmm._api import ab, atb
from jax_tsmm import _cuda  # noqa: F401  (registers the CUDA lowering)

__all__ = ["ab", "atb"]
__version__ = "0.1.0"
