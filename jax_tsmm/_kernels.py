"""Where a kernel comes from: the prebuilt set inside the extension, or a module
generated for the spec, compiled with nvcc and cached on disk.

The cache key is the source, the GPU architecture and the compiler's version,
so a second process finds the cubin and compiles nothing.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor

from jax_tsmm import _pip_cuda
from jax_tsmm.codegen import KernelSpec, MtsmSpec, module_source, mtsm_module_source
from jax_tsmm.codegen.spec import has_wgmma


class KernelBuildError(RuntimeError):
    """A generated kernel failed to compile; the message holds the compiler's log."""


class NvccNotFound(KernelBuildError):
    """No nvcc to compile a kernel outside the prebuilt set, or to find it in the
    disk cache (whose key holds the compiler's version)."""


@functools.cache
def extension():
    """The compiled extension module, or None where the package was built without CUDA."""
    try:
        from jax_tsmm import _tsmm_cuda
    except ImportError:
        return None
    return _tsmm_cuda


@functools.cache
def prebuilt_names() -> frozenset[str]:
    ext = extension()
    return frozenset(ext.prebuilt_kernels()) if ext else frozenset()


def cache_dir() -> pathlib.Path:
    root = os.environ.get("JAX_TSMM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jax_tsmm"
    )
    return pathlib.Path(root)


@functools.cache
def nvcc() -> str:
    """The compiler of the kernels outside the prebuilt set: $JAX_TSMM_NVCC, else the
    first nvcc on PATH, under $CUDA_HOME or $CUDA_PATH, of NVIDIA's pip packages
    (``_pip_cuda``) or under /usr/local/cuda."""
    candidates = [os.environ.get("JAX_TSMM_NVCC"), shutil.which("nvcc")]
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *_pip_cuda.homes(), "/usr/local/cuda"]
    candidates += [os.path.join(home, "bin", "nvcc") for home in homes if home]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise NvccNotFound(
        "jax_tsmm needs nvcc to compile kernels for shapes outside its prebuilt set; "
        "put it on PATH, set JAX_TSMM_NVCC, or pip install nvidia-cuda-nvcc"
    )


@functools.cache
def compiler_version() -> str:
    return subprocess.run([nvcc(), "--version"], capture_output=True, text=True, check=True).stdout


def runnable(spec: KernelSpec | MtsmSpec) -> bool:
    """Whether ``spec``'s kernels can be had here: built in, or compiled by nvcc (or
    found in the disk cache). Without nvcc a warning says so and the caller lowers
    to XLA's dot, so that a machine without the CUDA toolkit at run time still runs
    every call, the prebuilt kernels' at their speed."""
    if spec.name in prebuilt_names():
        return True
    try:
        nvcc()
    except NvccNotFound as error:
        warnings.warn(f"{error}; until then XLA's dot serves the calls that need one", RuntimeWarning,
                      stacklevel=2)
        return False
    return True


def library_for(spec: KernelSpec | MtsmSpec, arch: str) -> str:
    """Path of a cubin holding ``spec``'s kernels for ``arch`` (e.g. "sm_90"), or ""
    when the extension has them built in."""
    if spec.name in prebuilt_names():
        return ""
    return str(compile_module([spec], arch))


def target_flags(specs: list[KernelSpec] | list[MtsmSpec], arch: str) -> list[str]:
    """nvcc's target for ``specs`` on GPUs of ``arch``: the arch-specific sm_90a where a
    spec uses its instructions (wgmma; nvcc 13.0 takes it only in the -gencode form)."""
    if not any(spec.arch_specific for spec in specs):
        return [f"-arch={arch}"]
    if not has_wgmma(arch):
        raise KernelBuildError(f"jax_tsmm: wgmma kernels run on sm_90 (Hopper) only, not {arch}")
    return ["-gencode=arch=compute_90a,code=sm_90a"]


def _module_source(specs: list[KernelSpec] | list[MtsmSpec]) -> str:
    return (mtsm_module_source if isinstance(specs[0], MtsmSpec) else module_source)(specs)


def _nvcc(specs: list[KernelSpec] | list[MtsmSpec], arch: str, source: pathlib.Path, cubin: pathlib.Path,
          *flags: str) -> subprocess.CompletedProcess:
    """nvcc on ``source`` into ``cubin`` as the package compiles ``specs``, with ``flags``
    besides; KernelBuildError with the compiler's log where it fails."""
    command = [nvcc(), "-cubin", *target_flags(specs, arch), "-O3", *flags, "-o", str(cubin), str(source)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        names = ", ".join(spec.name for spec in specs)
        raise KernelBuildError(
            f"jax_tsmm: compiling kernel {names} for {arch} failed "
            f"({' '.join(command)}):\n{result.stderr}{result.stdout}"
        )
    return result


def compile_module(specs: list[KernelSpec] | list[MtsmSpec], arch: str) -> pathlib.Path:
    """Generate and compile ``specs`` (atb/ab or mtsm specs, one kind per module)
    into one cubin, through the on-disk cache."""
    source = _module_source(specs)
    key = hashlib.sha256("\0".join((source, arch, compiler_version())).encode()).hexdigest()[:24]
    target = cache_dir() / f"{specs[0].name}_{arch}_{key}.cubin"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        src = pathlib.Path(work) / "kernels.cu"
        src.write_text(source)
        out = pathlib.Path(work) / "kernels.cubin"
        _nvcc(specs, arch, src, out)
        os.replace(out, target)  # atomic: concurrent processes never see half a file
    return target


def compile_with_report(specs: list[KernelSpec] | list[MtsmSpec], arch: str, source: pathlib.Path,
                        *flags: str) -> tuple[pathlib.Path, str]:
    """``specs`` generated into ``source`` and compiled next to it as compile_module
    compiles them, outside the cache, with ptxas's register and spill report
    (``-Xptxas -v``) and ``flags`` besides (e.g. ``-Werror all-warnings``): the cubin and
    the compiler's report, for tests and tools that read what ptxas made of a kernel."""
    source.write_text(_module_source(specs))
    cubin = source.with_suffix(".cubin")
    return cubin, _nvcc(specs, arch, source, cubin, "-Xptxas", "-v", *flags).stderr


def ptxas_usage(report: str) -> dict[str, tuple[int, int]]:
    """Per entry function of a compile_with_report report: the registers ptxas gave it
    and the bytes it spilled (spill stores)."""
    usage = {}
    for entry in re.split(r"(?=Compiling entry function ')", report)[1:]:
        name = re.match(r"Compiling entry function '(\w+)'", entry)[1]
        usage[name] = (int(re.search(r"Used (\d+) registers", entry)[1]),
                       int(re.search(r"(\d+) bytes spill stores", entry)[1]))
    return usage


def precompile(specs: list[KernelSpec | MtsmSpec], arch: str) -> None:
    """Compile the specs' modules in parallel (one nvcc per core), warming the cache."""
    missing = [s for s in dict.fromkeys(specs) if s.name not in prebuilt_names()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda spec: compile_module([spec], arch), missing))


def compilable(specs: list[KernelSpec | MtsmSpec], arch: str) -> list[KernelSpec | MtsmSpec]:
    """The specs whose modules compile (in parallel, warming the cache), in order; each
    of the others is reported with the compiler's last lines and left out. For
    searches: a configuration within the validated limits may still fail ptxas
    (an H100 tune of float32 atb 13x13, 2026-11-27: 544 threads at 2 blocks per
    SM leave 56 registers, too few for DMMA's m16n8k4)."""
    def compiles(spec) -> bool:
        if spec.name in prebuilt_names():
            return True
        try:
            compile_module([spec], arch)
            return True
        except KernelBuildError as error:
            print(f"    does not compile, left out: {spec.name}: {' '.join(str(error).splitlines()[-2:])}",
                  flush=True)
            return False

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return [spec for spec, ok in zip(specs, pool.map(compiles, specs)) if ok]
