#!/usr/bin/env bash
# The test command: install what the tests need, then lint, type-check and run the suite.
# Extra arguments go to pytest (for example: scripts/test.sh tests/actor -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --dev
export PATH="$HOME/.local/bin:$PATH"

echo "== ruff check";  uv run --frozen ruff check .
echo "== ruff format"; uv run --frozen ruff format --check .
echo "== mypy";        uv run --frozen mypy
echo "== pytest"
set +e
uv run --frozen pytest --durations=15 "$@"  # the slowest tests, to keep the suite fast
code=$?
set -e
if [[ $code -eq 5 ]]; then
  echo "pytest collected no tests: the test setup is broken" >&2
  exit 1
fi
exit $code
