#!/usr/bin/env bash
# Prove selector's CUDA paths on a GPU machine (fp16, int8, gptq-int4, awq-int4 on a tiny model built
# on the spot; nothing is downloaded). Writes one JSON of results; see scripts/gpu_check.py.
#   scripts/gpu_check.sh [--out gpu_check.json] [--precisions fp16,int8,gptq-int4,awq-int4]
#   scripts/gpu_check.sh --arch qwen2.5-7b      (that architecture, random weights, with checks)
# Exit codes: 0 all ran (and every check passed), 1 otherwise, 3 no CUDA device (nothing was run).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python}"
if [ -z "${PYTHON:-}" ] && [ -x "$here/../.venv/bin/python" ]; then
  python="$here/../.venv/bin/python"
fi
exec "$python" "$here/gpu_check.py" "$@"
