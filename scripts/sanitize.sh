#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck on a sample of generated kernels.
# The platform allocator gives every buffer its own allocation, so an
# out-of-bounds access cannot hide inside XLA's memory pool.
set -uo pipefail
export XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false
status=0
for tool in memcheck racecheck; do
  echo "== $tool"
  TSMM_SANITIZE_TOOL=$tool compute-sanitizer --tool "$tool" --kernel-name kns=tsmm_ --error-exitcode 99 \
    python3 "$(dirname "$0")/sanitize_sample.py" || status=1
done
exit $status
