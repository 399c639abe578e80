#!/bin/bash
# profiles/cpu.yaml's tune with the live gate on three slices (gate_sets_2026-11-30/tune.sh: the
# same flags, tables and traces), run on the default prompts as of 2026-11-30 evening: short
# requests alternating with ones that carry their own context. Writes OUT (default /tmp/cpu_mix.yaml).
exec bash "$(dirname "$0")/../gate_sets_2026-11-30/tune.sh" "${1:-/tmp/cpu_mix.yaml}"
