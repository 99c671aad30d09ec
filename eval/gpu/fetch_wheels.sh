#!/usr/bin/env bash
# Fills .whl/ (ignored by git) with the wheels the GPU check installs on its machine (Python 3.12, x86-64, no
# network; see ../shared/DESIGN.md, "The GPU machine the GPU checks target"): the versions installed here of the
# packages that machine lacks or has too old, without their dependencies (the machine has those). Then checks that
# the wheels and the repository's files together stay under the 64 MiB that can be copied there.
#   bash eval/gpu/fetch_wheels.sh          # PYTHON picks the interpreter whose versions are pinned (python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
DEST=.whl
LIMIT_MIB=64
# transformers newer than the machine's 5.17 (with the hub, tokenizers, safetensors and regex versions it needs);
# sentence-transformers, peft and accelerate matching it; the config stack (hydra, omegaconf, antlr4); the test
# and path helpers the machine lacks; what the hub client and BM25 retrieval need beside them.
PACKAGES=(transformers huggingface-hub tokenizers safetensors regex sentence-transformers peft accelerate
          hydra-core omegaconf pytest-asyncio platformdirs httpx2 httpcore2 truststore hf-xet click kernels tomlkit bm25s)
SOURCE_ONLY=(antlr4-python3-runtime)  # published as a source archive only: built into a wheel here

pins() {
    "$PY" - "$@" <<'PYEOF'
import sys
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
PYEOF
}

mkdir -p "$DEST"
rm -f "$DEST"/*.whl
# shellcheck disable=SC2046
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" $(pins "${PACKAGES[@]}")
# shellcheck disable=SC2046
"$PY" -m pip wheel -q --no-deps -w "$DEST" $(pins "${SOURCE_ONLY[@]}")

wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
repo=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
total=$((wheels + repo))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
ls -1 "$DEST"
echo "wheels $(mib "$wheels") + repository $(mib "$repo") = $(mib "$total") (limit $LIMIT_MIB MiB)"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "over the limit: drop wheels the machine does not need" >&2
    exit 1
fi
