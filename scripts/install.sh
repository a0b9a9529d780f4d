#!/usr/bin/env bash
# Install mok and what its tests and notebooks need. On a machine without PyTorch this installs the CPU build
# (torch 2.13.0); on a GPU machine install your CUDA build of PyTorch first and it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import torch" 2>/dev/null; then
  python3 -m pip install -q "torch==2.13.0"
fi
python3 -m pip install -q -e ".[test,cuda]"
python3 -c "import mok, torch, triton; print(f'mok {mok.__version__}, torch {torch.__version__}, triton {triton.__version__}')"
