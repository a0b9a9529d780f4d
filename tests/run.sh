#!/usr/bin/env bash
# The test command (README): the CPU suite, Triton kernels under the interpreter; GPU tests skip without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import torch" 2>/dev/null || [ "${MOK_INSTALL:-1}" = 1 ] && ! python3 -c "import mok" 2>/dev/null; then
  python3 -m pip install -q torch==2.13.0 && python3 -m pip install -q -e ".[test,cuda]"
fi
if python3 -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  interpret=0
else
  interpret=1
fi
TRITON_INTERPRET=${TRITON_INTERPRET:-$interpret} python3 -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
