#!/usr/bin/env bash
# The Python venv of the integration tests: the official openai/anthropic SDKs (stream assembly
# comparison) and the official MCP SDK + mcp-server-time (MCP peers), pinned in
# tests/fixtures/requirements.txt, in .cache/sdk-venv. Reinstalled only when the pins change;
# `make test` runs this first.
set -euo pipefail
cd "$(dirname "$0")/.."
req=tests/fixtures/requirements.txt
if cmp -s "$req" .cache/sdk-venv/requirements.txt 2>/dev/null; then
  exit 0
fi
echo "sdk-venv: installing $req into .cache/sdk-venv"
rm -rf .cache/sdk-venv
python3 -m venv .cache/sdk-venv
.cache/sdk-venv/bin/pip install -q --disable-pip-version-check -r "$req"
cp "$req" .cache/sdk-venv/requirements.txt
