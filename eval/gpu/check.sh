#!/usr/bin/env bash
# The GPU check, for a machine with one CUDA GPU and no network whose Python has torch, transformers and
# sentence-transformers. Wheels of what else it needs lie in .whl/ (eval/gpu/fetch_wheels.sh fills it); they are
# installed into a private folder put first on PYTHONPATH, so nothing of the machine's own packages changes.
#   bash eval/gpu/check.sh [--out DIR]            # full plan on the GPU, about 8 minutes
#   bash eval/gpu/check.sh --dry-run --out DIR    # the same script on a CPU with tiny models, under 3 minutes
# Writes gpu_check.json and gpu_check.md into DIR (default ./gpu-check). PYTHON picks the interpreter (python3).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=${PYTHON:-python3}
DRY=0
for arg in "$@"; do [ "$arg" = "--dry-run" ] && DRY=1; done

if [ "$DRY" = 0 ] && compgen -G ".whl/*.whl" > /dev/null; then
    SITE=$(mktemp -d)/site
    echo "[gpu-check] installing $(ls .whl/*.whl | wc -l) wheels from .whl into $SITE"
    install() { "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"; }
    if ! install .whl/*.whl; then   # one at a time, so one bad wheel leaves the others installed
        for wheel in .whl/*.whl; do
            install "$wheel" || echo "[gpu-check] $wheel did not install: the machine's own version is used"
        done
    fi
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    # a wheel whose own needs the machine lacks shows here, once, instead of in every part's log
    "$PY" -c "import transformers.generation, sentence_transformers, peft, hydra" \
        || echo "[gpu-check] the installed wheels do not import: add what is missing to eval/gpu/fetch_wheels.sh"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export ORTHRUS_RAG_CACHE=${ORTHRUS_RAG_CACHE:-$(mktemp -d)}   # dummy models and the demo index, built fresh
exec "$PY" -m orthrus_rag.eval.gpu.check "$@"
