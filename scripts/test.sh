#!/usr/bin/env bash
# Run the test suite (sets up .venv first) on every core (pytest-xdist; VIRTUALIZE_TEST_WORKERS=0
# runs it in this one process). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n "${VIRTUALIZE_TEST_WORKERS:-auto}" "$@"
