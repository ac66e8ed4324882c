#!/usr/bin/env bash
# Profiles the `postern serve` a load generator run starts (issue 37's attribution):
#   scripts/profile/record.sh NAME [load generator arguments…]
# e.g. `record.sh c64 --calls 10,10 --seconds 8 --protocol 2026-07-28`, then
#   perf script -i /tmp/perf-NAME.data -F comm,ip,sym --no-inline > /tmp/NAME.script
#   python3 scripts/profile/attribute.py /tmp/NAME.script
# Build first, with line tables so inlined frames keep their names:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release -p postern -p postern-gateway-load
set -euo pipefail
name=$1; shift
bin=${TARGET_DIR:-target}/release
"$bin/postern-gateway-load" --postern "$bin/postern" "$@" > "/tmp/profile-$name.out" 2>&1 &
lg=$!
pid=
for _ in $(seq 100); do
  pid=$(pgrep -n -f "postern-gateway-load-$lg/" || true)
  [ -n "$pid" ] && break
  sleep 0.1
done
perf record -F 299 --call-graph dwarf,8192 -p "$pid" -o "/tmp/perf-$name.data" > "/tmp/perf-$name.log" 2>&1 &
wait $lg
sleep 2
cat "/tmp/profile-$name.out"
