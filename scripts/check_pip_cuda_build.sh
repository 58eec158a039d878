#!/usr/bin/env bash
# Install the package as a user of JAX's pip CUDA would, with no CUDA toolkit:
# a fresh venv holding NVIDIA's pip packages (those `pip install 'jax[cuda13]'`
# brings), the toolkit hidden, `pip install .` (isolated, as by default); then
# compare the extension's SASS with that of the extension installed here (built
# with the toolkit), and lower a call at a shape outside the prebuilt set, which
# the venv's nvcc compiles:
#
#   scripts/check_pip_cuda_build.sh WORK_DIR
#
# WORK_DIR receives the venv and a copy of the tracked files. Needs root (unshare
# hides /usr/local/cuda*), a package index for pip, and cuobjdump on PATH. Prints
# the SASS listings' differences, function names of anonymous namespaces aside
# (they hash the source's path): none is a pass.
set -euo pipefail
work=$(realpath "$1")
python=$(python3 -c 'import sys; print(sys.executable)')
version=$(nvcc --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
jax_version=$("$python" -c 'import jax; print(jax.__version__)')
rm -rf "$work/venv" "$work/src" "$work/cache" && mkdir -p "$work/src" "$work/empty"
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "jax==$jax_version" "nvidia-cuda-nvcc==$version" "nvidia-nvvm==$version" \
    "nvidia-cuda-crt==$version" "nvidia-cuda-runtime==${version%.*}.*"
git ls-files -z | xargs -0 cp --parents -t "$work/src"
hide=""
for toolkit in /usr/local/cuda*; do hide+="mount --bind $work/empty $toolkit && "; done
unshare -m bash -c "$hide cd $work && env -u CUDA_HOME -u CUDA_PATH PATH=/usr/bin:/bin JAX_TSMM_CACHE_DIR=$work/cache \
    bash -c '$work/venv/bin/pip install -q --no-deps ./src && $work/venv/bin/python -c \"
import jax, jax.numpy as jnp, jax_tsmm
from jax_tsmm import _kernels
a, b = jnp.ones((999, 29)), jnp.ones((999, 31))
lowered = jax.jit(jax_tsmm.atb).trace(a, b).lower(lowering_platforms=(\\\"cuda\\\",)).as_text()
print(\\\"29 x 31 lowered to a kernel compiled by\\\", _kernels.nvcc(), \\\"tsmm_atb\\\" in lowered)\"'"
installed=$(cd / && "$python" -c 'import jax_tsmm._tsmm_cuda as m; print(m.__file__)')  # the installed package, not the source tree
sass() { cuobjdump -sass "$1" | grep -v '^\s*$' | sed 's/_GLOBAL__N__[0-9a-f]*_/_GLOBAL__N__/'; }
diff <(sass "$work"/venv/lib/python3*/site-packages/jax_tsmm/_tsmm_cuda*.so) <(sass "$installed") \
    && echo "the same SASS: $(sass "$installed" | grep -c 'Function :') functions"
