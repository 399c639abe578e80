#!/usr/bin/env bash
# Builds the benchmark anchor (llama-cpp-python, the `anchors` extra) into .venv from source.
#
# Why not a plain `pip install '.[anchors]'`: PyPI ships llama-cpp-python as source only, and
# its default build (GGML_NATIVE=ON) turns on every ISA extension the build machine has.  On
# these machines' AMX Xeons that build segfaulted at the first decode, so the flags are set
# explicitly from this CPU's flags: AVX/AVX2/FMA/F16C and AVX-512 where present, AMX never.
# Takes about 5 minutes on 2 cores; idempotent (skips when llama_cpp already imports).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if "$PY" -c "import llama_cpp" 2>/dev/null; then
    echo "[install_anchors] llama-cpp-python already installed: $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)')" >&2
    exit 0
fi
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
args="-DGGML_NATIVE=OFF -DGGML_AVX=$(has avx) -DGGML_AVX2=$(has avx2) -DGGML_FMA=$(has fma)"
args+=" -DGGML_F16C=$(has f16c) -DGGML_AVX512=$(has avx512f)"
args+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
args+=" -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
echo "[install_anchors] building llama-cpp-python with CMAKE_ARGS=$args (about 5 min)" >&2
started=$(date +%s)
CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" -m pip install --quiet -e ".[anchors]"
echo "[install_anchors] ready in $(( $(date +%s) - started ))s" >&2
