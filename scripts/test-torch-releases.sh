#!/bin/bash
# The hook's and capture's CPU tests on the oldest and the newest torch gemmscope's hook is tested
# on (gemmscope_protocol.TESTED_TORCH: pyproject's `gpu` extra starts at the oldest, README says the
# range), each in a virtual environment of its own beside the machine's packages: the suite itself
# runs on the torch scripts/setup-tests.sh installs. PyPI holds CUDA builds of these releases alone;
# on a machine without a GPU they import and run on the CPU as the tests need.
#
# Usage: bash scripts/test-torch-releases.sh   (after README's test command: it needs its packages)
#   GEMMSCOPE_TORCH_ENVS=DIR   where the environments go (default /opt/gemmscope-torch); kept, so
#                              that a second run installs nothing
set -euo pipefail
cd "$(dirname "$0")/.."
envs=${GEMMSCOPE_TORCH_ENVS:-/opt/gemmscope-torch}
releases=$(python3 -c 'import sys; sys.path.insert(0, "gemmscope/autocast_hook")
from gemmscope_protocol import TESTED_TORCH; print(*TESTED_TORCH)')
for release in $releases; do
  env="$envs/$release"
  if ! "$env/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$release.'))" 2>/dev/null; then
    python3 -m venv --system-site-packages "$env"
    "$env/bin/python" -m pip install -q "torch~=$release.0"  # the release's newest patch
  fi
  echo "test-torch-releases: torch $("$env/bin/python" -c 'import torch; print(torch.__version__)')" >&2
  "$env/bin/python" -m pytest -q -rs -p no:cacheprovider tests/test_autocast_hook.py tests/test_torch_capture.py \
    tests/test_hook_guard.py
done
