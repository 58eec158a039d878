"""Generator of jax_tsmm's CUDA kernels: plain-data specs in, CUDA C++ out (no JAX here)."""

from .abi import header
from .emit import kernel_source, module_source
from .model import default_config
from .spec import Config, InvalidSpec, KernelSpec, Problem, validate

__all__ = [
    "Config",
    "InvalidSpec",
    "KernelSpec",
    "Problem",
    "default_config",
    "header",
    "kernel_source",
    "module_source",
    "validate",
]
