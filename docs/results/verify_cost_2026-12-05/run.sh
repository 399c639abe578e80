#!/bin/bash
# Where a verify's cost per extra token goes on the AVX-512 EPYC (2026-12-05): run from the repository root,
# on a quiet machine (~6 min). See ../2026-12-05_verify_cost_avx512.md.
set -e
D=docs/results/verify_cost_2026-12-05
T=$(mktemp -d)
cp sglang_cast/models/csrc/vnni_dot.cpp $T/same.cpp
patch -s -o $T/unpack_once.cpp sglang_cast/models/csrc/vnni_dot.cpp $D/unpack_once.patch
.venv/bin/python $D/kernel_variants.py $T/same.cpp,$T/unpack_once.cpp 1,4,8,13,16 7     # 1. the int4 kernel, hot
.venv/bin/python $D/stream_vs_hot.py 1,2,4,8,13,16,32 5                                 # 2. a forward's linears, streamed vs hot
.venv/bin/python $D/forward_profile.py 1,16                                             # 3. whole forwards, by op
.venv/bin/python $D/nta_probe.py 1 40 && .venv/bin/python $D/nta_probe.py 13 30              # 4. non-temporal prefetch: host work after a forward
