#!/usr/bin/env bash
# Installs the peer the upstream benchmark compares with (bench/gateway-load --upstream):
# CTRLRun 0.12.2 from PyPI, with its gateway extra, into a throwaway venv under
# $POSTERN_BENCH_DIR (default $HOME/.cache/postern-bench). Nothing else on the machine changes.
set -euo pipefail
dir="${POSTERN_BENCH_DIR:-$HOME/.cache/postern-bench}"
venv="$dir/ctrlrun-venv"
if [ ! -x "$venv/bin/ctrlrun" ] || ! "$venv/bin/ctrlrun" --version 2>/dev/null | grep -q "0.12.2"; then
    rm -rf "$venv"
    mkdir -p "$dir"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'ctrlrun[gateway]==0.12.2'
fi
"$venv/bin/ctrlrun" --version
echo "ctrlrun: $venv/bin/ctrlrun"
