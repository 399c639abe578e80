# Sourced by the SGLang record scripts (from the repository root): `... | quiet` keeps each tqdm bar's
# 100 % line and drops its redraws (split at \r), SGLang's own log lines and import warnings.
quiet() {
  tr '\r' '\n' | grep -a -v " [0-9]\{1,2\}%|\|it/s\]$\|s/it\]$\|s/engine\]$\|^\[20[0-9-]* [0-9:]*\]\|Warning: \|warnings.warn(\|^\s*$"
}
