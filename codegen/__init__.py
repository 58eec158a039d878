"""Generator of jax_tsmm's CUDA kernels: plain-data specs in, CUDA C++ out (no JAX here)."""

from .abi import header
from .emit import kernel_source, module_source
from .model import carried_to_gram, carried_to_update, default_config, runs_gauss
from .mtsm import MtsmConfig, MtsmProblem, MtsmSpec
from .mtsm import module_source as mtsm_module_source
from .spec import Config, InvalidSpec, KernelSpec, Problem, validate

__all__ = [
    "Config",
    "InvalidSpec",
    "KernelSpec",
    "MtsmConfig",
    "MtsmProblem",
    "MtsmSpec",
    "Problem",
    "carried_to_gram",
    "carried_to_update",
    "default_config",
    "header",
    "kernel_source",
    "module_source",
    "mtsm_module_source",
    "runs_gauss",
    "validate",
]
