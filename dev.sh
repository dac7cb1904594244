#!/usr/bin/env bash
# Set-up and entry points of sandbridge's development tree.
#   ./dev.sh demo [--open]   install what is missing, then run the sandboxed demo app
#   ./dev.sh test [ARGS]     install what is missing, then lint, type-check and run every test
#   ./dev.sh bench [ARGS]    install what is missing, then run the relay benchmark
#   ./dev.sh setup           install only (what the tests need too)
#   ./dev.sh lock            re-pin requirements.lock and requirements-apps.lock from
#                            pyproject.toml's ranges
set -euo pipefail
cd "$(dirname "$0")"

# Debian packages: bubblewrap (the default sandbox backend), util-linux (unshare,
# setpriv: the fallback backend), chromium and firefox-esr (browser tests), nginx-light and socat
# (reference relays in the benchmark), procps (ps, for process checks in tests), wrk and
# curl (the benchmark's load generators; curl is also the HTTP client inside the sandbox
# in the network tests), iproute2 (ip: the network tests link their "internet"
# namespace to the host's with a veth pair), openssh-server (sshd: the real far machine
# of the SSH transport's tests, started by each test on a free loopback port).
DEBIAN_PACKAGES=(bubblewrap util-linux gcc libc6-dev chromium firefox-esr nginx-light socat procps wrk curl iproute2
  openssh-server)
# Node and npm run the test of Node's `open` package inside a sandbox; a machine whose node
# comes from elsewhere (with its own npm) keeps it, so Debian's are added only without one.
if ! command -v node >/dev/null; then DEBIAN_PACKAGES+=(nodejs npm); fi
VENV=.venv
# The real apps of the end-to-end tests (pyproject.toml's `apps` extra, pinned in
# requirements-apps.lock: Flask, Streamlit, Gradio, JupyterLab) live in a virtualenv of
# their own, as a project's environment is: the tests put it first on PATH.
APPS_VENV=.venv-apps
# The Node packages the tests run inside a sandbox, each pinned by its package-lock.json;
# npm ci installs them into their node_modules (git-ignored): Node's `open`, as an agent's
# tool calls it, and Vite, a dev server with hot reload.
NODE_FIXTURES=(tests/apps/node_open tests/apps/vite_app)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "dev.sh: need root to run: $*" >&2; return 1
  fi
}

install_debian_packages() {
  local missing=()
  for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "dev.sh: installing Debian packages: ${missing[*]}" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
}

install_python_packages() {
  # requirements.lock pins every package (made by pip-compile from pyproject.toml's
  # ranges; README, "Dependencies"); the project itself goes in without resolving again.
  local stamp="$VENV/.installed-$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)"
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ]; then
    "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.lock
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e .
    rm -f "$VENV"/.installed-*
    touch "$stamp"
  fi
}

install_app_packages() {
  local stamp="$APPS_VENV/.installed-$(sha256sum <requirements-apps.lock | cut -c1-16)"
  if [ ! -x "$APPS_VENV/bin/python" ]; then
    python3 -m venv "$APPS_VENV"
  fi
  if [ ! -f "$stamp" ]; then
    "$APPS_VENV/bin/pip" install -q --disable-pip-version-check -r requirements-apps.lock
    rm -f "$APPS_VENV"/.installed-*
    touch "$stamp"
  fi
}

install_node_packages() {
  if ! command -v npm >/dev/null; then
    echo "dev.sh: node is installed but npm is not: install npm (the Node tests need it)" >&2
    return 1
  fi
  local fixture stamp
  for fixture in "${NODE_FIXTURES[@]}"; do
    stamp="$fixture/node_modules/.installed-$(sha256sum <"$fixture/package-lock.json" | cut -c1-16)"
    if [ ! -f "$stamp" ]; then
      (cd "$fixture" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
      touch "$stamp"
    fi
  done
}

setup() {
  install_debian_packages
  install_python_packages
  install_node_packages
}

# What only the tests use on top: the real apps' virtualenv (several hundred MB), so the
# demo and the benchmark do not wait for it.
setup_tests() {
  setup
  install_app_packages
}

command=${1:-demo}
shift || true
case "$command" in
  setup) setup_tests ;;
  demo) setup; exec "$VENV/bin/sandbridge" demo "$@" ;;
  test)
    setup_tests
    "$VENV/bin/ruff" check src tests benchmarks
    "$VENV/bin/ruff" format --check src tests benchmarks
    "$VENV/bin/mypy"
    exec "$VENV/bin/python" -m pytest "$@"
    ;;
  bench) setup; exec "$VENV/bin/python" -m benchmarks.relay_bench "$@" ;;
  lock)
    setup
    "$VENV/bin/pip" install -q --disable-pip-version-check pip-tools
    "$VENV/bin/pip-compile" -q --extra dev --extra bench --strip-extras --no-emit-index-url \
      --no-emit-find-links -o requirements.lock pyproject.toml "$@"
    exec "$VENV/bin/pip-compile" -q --extra apps --strip-extras --no-emit-index-url \
      --no-emit-find-links -o requirements-apps.lock pyproject.toml "$@"
    ;;
  *) echo "usage: ./dev.sh [setup|demo [--open]|test [pytest args]|bench [--smoke]]" >&2; exit 2 ;;
esac
