#!/usr/bin/env bash
# The test command (README). CPU: Triton kernels under the interpreter (tests/conftest.py selects it), GPU tests
# skipped. GPU: everything.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -c "import mok, pytest" 2>/dev/null || bash scripts/install.sh || exit 1
python3 -m pytest -q -p no:cacheprovider "$@"
rc=$?
# pytest exits 5 when it collected no tests: never let that pass silently.
if [ $rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
