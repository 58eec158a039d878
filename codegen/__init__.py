"""Generator of jax_tsmm's CUDA kernels: plain-data specs in, CUDA C++ out (no JAX here)."""

from codegen.abi import header
from codegen.emit import kernel_source, module_source
from codegen.model import default_config
from codegen.spec import Config, InvalidSpec, KernelSpec, Problem, validate

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
