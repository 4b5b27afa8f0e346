#!/usr/bin/env bash
# Create .venv (Python >= 3.12) and install virtualize with its test dependencies.
# Idempotent: re-installs only when pyproject.toml changed. Prints the venv's python path.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
  local c
  for c in "${PYTHON:-}" python3.13 python3.12 \
           "$HOME/.pyenv/versions/3.13.0/bin/python" "$HOME/.pyenv/versions/3.12.1/bin/python" \
           python3 python; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 &&
       "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"; return 0
    fi
  done
  echo "setup: no Python >= 3.12 found (set PYTHON=/path/to/python3.12)" >&2
  return 1
}

if [ ! -x .venv/bin/python ] ||
   ! .venv/bin/python -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
  rm -rf .venv
  "$(find_python)" -m venv .venv
fi
stamp=.venv/.virtualize-installed
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing virtualize and its test dependencies into .venv ..." >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]" >&2
  echo "$want" > "$stamp"
fi
