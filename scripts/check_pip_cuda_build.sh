#!/usr/bin/env bash
# Build the extension with NVIDIA's pip packages alone (the CUDA that
# `pip install 'jax[cuda13]'` brings), the toolkit hidden, and compare its SASS
# with that of the extension installed here (built with the toolkit):
#
#   scripts/check_pip_cuda_build.sh WORK_DIR
#
# WORK_DIR receives the pip packages, the build tools and the build. Needs root
# (unshare hides /usr/local/cuda*), network or a package index for pip, and
# cuobjdump on PATH. Prints the two SASS listings' differences, function names
# of anonymous namespaces aside (they hash the source's path): none is a pass.
set -euo pipefail
work=$(realpath "$1")
python=$(python3 -c 'import sys; print(sys.executable)')
version=$(nvcc --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
mkdir -p "$work"
"$python" -m pip install -q --upgrade --no-deps --target "$work/cuda" "nvidia-cuda-nvcc==$version" "nvidia-nvvm==$version" \
    "nvidia-cuda-crt==$version" "nvidia-cuda-runtime==${version%.*}.*"
"$python" -m pip install -q --upgrade --target "$work/tools" scikit-build-core nanobind
rm -rf "$work/src" "$work/site" && mkdir -p "$work/src" "$work/empty"
git ls-files -z | xargs -0 cp --parents -t "$work/src"
hide=""
for toolkit in /usr/local/cuda*; do hide+="mount --bind $work/empty $toolkit && "; done
unshare -m bash -c "$hide cd $work/src && env -u CUDA_HOME -u CUDA_PATH PATH=/usr/bin:/bin \
    PYTHONPATH=$work/cuda:$work/tools $python -m pip install -q --no-build-isolation --no-deps --target $work/site ."
installed=$(cd / && "$python" -c 'import jax_tsmm._tsmm_cuda as m; print(m.__file__)')  # the installed package, not the source tree
sass() { cuobjdump -sass "$1" | grep -v '^\s*$' | sed 's/_GLOBAL__N__[0-9a-f]*_/_GLOBAL__N__/'; }
diff <(sass "$work"/site/jax_tsmm/_tsmm_cuda*.so) <(sass "$installed") && echo "the same SASS: $(sass "$installed" | grep -c 'Function :') functions"
