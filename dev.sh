#!/usr/bin/env bash
# Set-up and entry points of sandbridge's development tree.
#   ./dev.sh demo [--open]   install what the demo needs, then run the sandboxed demo app
#   ./dev.sh install         install sandbridge for this user (sandbridge, ags-webview-url
#                            and sandbridge-open on PATH; README, "Install")
#   ./dev.sh test [ARGS]     install what is missing, then lint, type-check and run every test,
#                            in parallel workers; --fast: the inner loop's tier (tests/conftest.py)
#   ./dev.sh bench [ARGS]    install what is missing, then run the relay benchmark
#   ./dev.sh tsan            the front door's C built with ThreadSanitizer, its tests run on
#                            that build (docs/relay.md, "The front door's safety net")
#   ./dev.sh setup           install only (what the tests need too)
#   ./dev.sh lock            re-pin requirements.lock and requirements-apps.lock from
#                            pyproject.toml's ranges
set -euo pipefail
cd "$(dirname "$0")"

# Debian packages the demo needs: bubblewrap (the default sandbox backend) and util-linux
# (unshare, setpriv: the fallback backend). Nothing else: the relay's C front door is built
# where a compiler is and skipped where none is (README, "Install").
DEMO_PACKAGES=(bubblewrap util-linux)
# What the tests and the benchmark add: gcc, libc6-dev and python3-dev (the front door, which
# they build with -Werror, against the distribution's Python), python3-venv (the
# virtualenvs, made from that Python), chromium and firefox-esr (browser tests),
# nginx-light and socat (reference relays in the benchmark), procps (ps, for process
# checks in tests), wrk and curl (the benchmark's load generators; curl is also the HTTP
# client inside the sandbox in the network tests), iproute2 (ip: the network tests link their "internet"
# namespace to the host's with a veth pair), openssh-server (sshd: the real far machine
# of the SSH transport's tests, started by each test on a free loopback port), clang and
# libclang-rt-14-dev (the front door's fuzz target: libFuzzer and the sanitizers' runtimes
# for clang are in the latter, only recommended by clang), zsh and fish (the completion
# scripts' syntax checks), xvfb and xclip (a real X clipboard for the clipboard bridge's
# tests: each starts its own Xvfb), podman, crun and catatonit (the real container engine
# of the container bridge's tests: podman's API in namespaces of its own, each test run's
# engine with its own store) and busybox-static (that engine's one image, made offline).
TEST_PACKAGES=(gcc libc6-dev python3-venv python3-dev chromium firefox-esr nginx-light socat
  procps wrk curl iproute2 openssh-server clang libclang-rt-14-dev zsh fish
  xvfb xclip podman crun catatonit busybox-static)
# Node and npm run the test of Node's `open` package inside a sandbox; a machine whose node
# comes from elsewhere (with its own npm) keeps it, so Debian's are added only without one.
if ! command -v node >/dev/null; then TEST_PACKAGES+=(nodejs npm); fi
# Another apt (an unattended upgrade, a second checkout's set-up) holds the lock for a
# while: wait for it up to this many seconds instead of failing at once.
APT_LOCK_WAIT=600
VENV=.venv
# The interpreter .venv and .venv-apps are made from: SANDBRIDGE_PYTHON where set, else the
# distribution's own python3 where it can make them and build the front door (3.11 or newer,
# ensurepip, Python.h: python3-venv and python3-dev, in the packages below), else python3
# on PATH. The distribution's is the Python a user of stock Debian or Ubuntu runs
# sandbridge on, and it is built with profile-guided and link-time optimisation, which a
# pyenv build (python3 on PATH on some machines) is not: each of the thousands of Python
# processes a test run starts takes about a quarter less CPU on it (README, "Tests").
SYSTEM_PYTHON=/usr/bin/python3
# What make_venv compares: the interpreter's real path and its version.
WHICH_PYTHON='import os, sys; print(os.path.realpath(sys._base_executable), sys.version.split()[0])'
choose_python() {
  if [ -n "${SANDBRIDGE_PYTHON:-}" ]; then
    PYTHON3=$SANDBRIDGE_PYTHON
  elif [ -x "$SYSTEM_PYTHON" ] && "$SYSTEM_PYTHON" -c 'import ensurepip, os, sys, sysconfig, venv
sys.exit(sys.version_info < (3, 11) or not os.path.isfile(
    os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
    PYTHON3=$SYSTEM_PYTHON
  else
    PYTHON3=python3
  fi
  # Asked once, before any virtualenv is judged by it: an interpreter that does not run
  # (a mistyped SANDBRIDGE_PYTHON, a pyenv shim of a version not installed) stops here,
  # before make_venv could take a working virtualenv for another's.
  if ! PYTHON3_IS=$("$PYTHON3" -c "$WHICH_PYTHON"); then
    echo "dev.sh: $PYTHON3 does not run: set SANDBRIDGE_PYTHON to a Python 3.11 or newer" >&2
    exit 1
  fi
}
choose_python

# make_venv DIR: DIR a virtualenv of PYTHON3's. One made from another interpreter or
# version (before PYTHON3 was chosen as above, with another SANDBRIDGE_PYTHON, or before a
# Python upgrade), or whose interpreter is gone, is made again: its packages' stamps go
# with it, so they install again too. Each DIR is judged once a run: the apps' install,
# in the background, never judges (and so never removes) .venv while it is being filled.
JUDGED_VENVS=" "
make_venv() {
  local dir=$1
  case "$JUDGED_VENVS" in *" $dir "*) return 0 ;; esac
  if [ -e "$dir/pyvenv.cfg" ]; then
    if [ "$("$dir/bin/python" -c "$WHICH_PYTHON" 2>/dev/null)" = "$PYTHON3_IS" ]; then
      JUDGED_VENVS="$JUDGED_VENVS$dir "
      return 0
    fi
    echo "dev.sh: $dir was made from another Python than $PYTHON3 ($PYTHON3_IS): making it again" >&2
    rm -rf "$dir"
  fi
  "$PYTHON3" -m venv "$dir"
  JUDGED_VENVS="$JUDGED_VENVS$dir "
}
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
  elif command -v sudo >/dev/null; then sudo ${SUDO_NO_PROMPT:+-n} "$@"
  else echo "dev.sh: need root to run: $*" >&2; return 1
  fi
}

apt_get() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout="$APT_LOCK_WAIT" "$@"
}

# apt-get update takes the package lists' lock, for which apt's lock timeout does not wait
# (apt 2.6 fails at once): try again while another apt holds it, up to APT_LOCK_WAIT.
APT_RETRY_SECONDS=5
apt_update() {
  local waited=0 said
  until said=$(apt_get update -qq 2>&1); do
    if [[ $said != *"Could not get lock"* ]] || [ "$waited" -ge "$APT_LOCK_WAIT" ]; then
      printf '%s\n' "$said" >&2
      return 1
    fi
    if [ "$waited" -eq 0 ]; then echo "dev.sh: waiting for another apt to finish" >&2; fi
    sleep "$APT_RETRY_SECONDS"
    waited=$((waited + APT_RETRY_SECONDS))
  done
  if [ -n "$said" ]; then printf '%s\n' "$said" >&2; fi
}

# install_debian_packages PACKAGE...: those not installed yet.
install_debian_packages() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "dev.sh: installing Debian packages: ${missing[*]}" >&2
    apt_update
    apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# pip, its own lines filtered: a machine-wide pip configuration whose find-links or index
# directories lack a package makes pip warn once per package ("Location ... is ignored"),
# which says nothing about this tree; every other line, and pip's status, pass through.
pip_quiet() {
  local pip=$1
  shift
  "$pip" "$@" --disable-pip-version-check 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2)
}

# uv, pinned in requirements.lock, installs the lock files: several times faster than pip
# and in a fraction of its CPU (README, "Dependencies"). pip puts it in .venv first (one
# wheel, no dependencies), before the two virtualenvs install side by side.
ensure_uv() {
  local pin
  pin=$(sed -n 's/^uv==//p' requirements.lock)
  if [ -z "$pin" ]; then
    echo "dev.sh: requirements.lock pins no uv (a line uv==VERSION): ./dev.sh lock makes it" >&2
    return 1
  fi
  make_venv "$VENV"
  if [ "$("$VENV/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$pin" ]; then
    pip_quiet "$VENV/bin/pip" install -q --no-deps "uv==$pin"
  fi
}

# install_locked VENV LOCK: the lock file's packages into VENV, with uv given pip's
# configuration (a machine's index mirror, CA bundle, proxy: tests/pip_config_to_uv.py
# translates it), bytecode compiled (the sandboxes see the virtualenvs read-only, and would
# compile on every import). A setting of pip's that uv has no equivalent for makes pip
# install it instead, said in one line.
install_locked() {
  local venv=$1 lock=$2 said status=0 command
  ensure_uv
  said=$("$venv/bin/python" tests/pip_config_to_uv.py "$VENV/bin/uv" pip install -q \
    --python "$venv/bin/python" --compile-bytecode -r "$lock") || status=$?
  if [ "$status" -eq 0 ]; then
    mapfile -t command <<<"$said"
    # A failure of uv's own (a certificate or a proxy it takes otherwise than pip, say)
    # leaves the install to pip, which says what is wrong if it fails too.
    "${command[@]}" || {
      echo "dev.sh: uv could not install $lock (status $?); pip installs it" >&2
      pip_quiet "$venv/bin/pip" install -q -r "$lock"
    }
  elif [ "$status" -eq 3 ]; then
    echo "dev.sh: pip installs $lock: $said" >&2
    pip_quiet "$venv/bin/pip" install -q -r "$lock"
  else
    printf '%s\n' "$said" >&2
    return "$status"
  fi
}

# pip's arguments for the editable install of sandbridge itself (its front door's C build):
# with the setuptools requirements.lock pins, already in .venv, not in an isolated build
# environment, which pip would first fill with the newest setuptools from the index (on a
# clean clone, half the step: 9 CPU-s and 17 s before, 4.5 CPU-s and 8 s without).
EDITABLE=(install --no-deps --no-build-isolation -e .)

# install_python_packages [CFLAGS]: CFLAGS added to the front door's build (-Werror for
# the tests and CI, none for the demo: a user's newer compiler's new warning must not
# cost the demo its accelerator).
install_python_packages() {
  # requirements.lock pins every package (made by pip-compile from pyproject.toml's
  # ranges; README, "Dependencies"); the project itself goes in without resolving again.
  # The front door's C sources are in the stamp too: an editable install keeps the
  # extension it built, which still imports after a change to them but lacks what changed.
  local stamp="$VENV/.installed-$(cat pyproject.toml requirements.lock \
    src/sandbridge/relay/front/_front_*.[ch] src/sandbridge/relay/front/_tunnel.c | sha256sum | cut -c1-16)"
  make_venv "$VENV"
  if [ ! -f "$stamp" ]; then
    install_locked "$VENV" requirements.lock
    CFLAGS="${CFLAGS:-} ${1:-}" pip_quiet "$VENV/bin/pip" "${EDITABLE[@]}" -q
    rm -f "$VENV"/.installed-*
    touch "$stamp"
  fi
}

# The tests and CI need the front door, built with -Werror: a warning in _front_*.c fails
# here, not only on a user's newer compiler. pyproject.toml's build skips the extension
# when it does not compile (a user's machine without a compiler), so its absence is
# checked after the build, which is run again with -Werror when it is missing (the demo
# built it first on a machine without gcc, say).
require_front_door() {
  local check=(-c "import sandbridge.relay.front._front, sandbridge.relay.front._tunnel")
  if ! "$VENV/bin/python" "${check[@]}" 2>/dev/null; then
    CFLAGS="${CFLAGS:-} -Werror" pip_quiet "$VENV/bin/pip" "${EDITABLE[@]}" -q
  fi
  if ! "$VENV/bin/python" "${check[@]}" 2>/dev/null; then
    echo "dev.sh: the front door (src/sandbridge/relay/front/_front_*.c, _tunnel.c) did not build with -Werror;" \
      "see why: CFLAGS=-Werror $VENV/bin/pip ${EDITABLE[*]} -v" >&2
    return 1
  fi
}

install_app_packages() {
  local stamp="$APPS_VENV/.installed-$(sha256sum <requirements-apps.lock | cut -c1-16)"
  make_venv "$APPS_VENV"
  if [ ! -f "$stamp" ]; then
    install_locked "$APPS_VENV" requirements-apps.lock
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
  install_debian_packages "${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
  setup_packages
}

# What setup installs once the Debian packages are there.
setup_packages() {
  install_python_packages -Werror
  require_front_door
  install_node_packages
}

# What only the tests use on top: the real apps' virtualenv (several hundred MB), so the
# demo and the benchmark do not wait for it. It installs beside the rest, not after it:
# most of an install's time is compiling bytecode, on one core (a fresh clone's pip spent
# a minute on it alone). Both use .venv's uv, put there first. Debian's packages (on a
# fresh machine, the longest step: two browsers, clang, podman) install beside them too,
# where no password is asked (root, or sudo without one); the front door's build and npm
# wait for them (gcc, node). A failed step ends the script and the apps' install with it
# (the trap runs after this function has returned: the pids are global); a running apt is
# left to finish, never killed halfway.
setup_tests() {
  local packages=("${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
  DEBIAN_PID=""
  if [ "$(id -u)" -eq 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
    # In the background sudo cannot ask: -n makes a lapsed credential fail, loudly.
    SUDO_NO_PROMPT=1 install_debian_packages "${packages[@]}" &
    DEBIAN_PID=$!
  else
    install_debian_packages "${packages[@]}" # sudo asks for a password here
  fi
  ensure_uv
  install_app_packages &
  APPS_PID=$!
  trap 'pkill -P "$APPS_PID" 2>/dev/null; kill "$APPS_PID" 2>/dev/null || true' EXIT
  # Not `if ! ...`: errexit is off in a condition, so a failed step would not stop the
  # ones after it.
  if [ -n "$DEBIAN_PID" ]; then wait "$DEBIAN_PID"; fi
  setup_packages
  wait "$APPS_PID"
  trap - EXIT
}

# Where ./dev.sh install puts sandbridge without pipx: a virtualenv of its own in the
# user's data directory, its three commands linked into ~/.local/bin.
USER_VENV="${XDG_DATA_HOME:-$HOME/.local/share}/sandbridge/venv"
USER_BIN="$HOME/.local/bin"
COMMANDS=(sandbridge ags-webview-url sandbridge-open)

# The pip that installs into USER_VENV, in USER_PIP: python3's own, run for the virtualenv
# (pip --python, pip 22.3 and newer), where python3 has one, as pipx does; the virtualenv is
# then made without a pip of its own, whose install (ensurepip byte-compiles pip and
# setuptools) was a third of the install's CPU. Elsewhere, the virtualenv's own pip.
user_venv() {
  local new_pip='import pip, sys; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (22, 3))'
  if python3 -c "$new_pip" 2>/dev/null; then
    if [ ! -x "$USER_VENV/bin/python" ]; then
      python3 -m venv --without-pip "$USER_VENV"
    fi
    USER_PIP=(python3 -m pip --python "$USER_VENV/bin/python")
  else
    if [ ! -x "$USER_VENV/bin/python" ]; then
      python3 -m venv "$USER_VENV"
    fi
    # A virtualenv made here when python3 had a pip, which it has no longer.
    if [ ! -x "$USER_VENV/bin/pip" ]; then
      "$USER_VENV/bin/python" -m ensurepip --default-pip >/dev/null
    fi
    USER_PIP=("$USER_VENV/bin/pip")
  fi
}

# Install this checkout for the user, outside any project: with pipx when there is one
# (it puts the commands in ~/.local/bin itself), else in USER_VENV. Dependencies come from
# the user's own pip configuration; a machine without a C compiler gets the Python relay.
install_for_user() {
  if command -v pipx >/dev/null; then
    pipx install --force .
  else
    user_venv
    pip_quiet "${USER_PIP[@]}" install -q --upgrade .
    mkdir -p "$USER_BIN"
    for name in "${COMMANDS[@]}"; do
      ln -sfn "$USER_VENV/bin/$name" "$USER_BIN/$name"
    done
    echo "dev.sh: installed sandbridge in $USER_VENV; commands linked in $USER_BIN"
  fi
  case ":$PATH:" in
    *":$USER_BIN:"*) ;;
    *) echo "dev.sh: $USER_BIN is not on PATH: add it (export PATH=\"$USER_BIN:\$PATH\")" ;;
  esac
  install_completions
  echo "dev.sh: next, see what works on this machine: sandbridge doctor"
}

# Shell completions (`sandbridge completions SHELL`, generated from the command line's
# parser) where each shell looks for a user's own: bash-completion and fish load them from
# there; zsh needs the directory on its fpath, which is the user's ~/.zshrc to say.
install_completions() {
  local sandbridge="$USER_BIN/sandbridge"
  [ -x "$sandbridge" ] || sandbridge=$(command -v sandbridge) || return 0
  local data="${XDG_DATA_HOME:-$HOME/.local/share}"
  local bash_dir="$data/bash-completion/completions" zsh_dir="$data/zsh/site-functions"
  local fish_dir="${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions"
  mkdir -p "$bash_dir" "$zsh_dir" "$fish_dir"
  "$sandbridge" completions bash >"$bash_dir/sandbridge"
  "$sandbridge" completions zsh >"$zsh_dir/_sandbridge"
  "$sandbridge" completions fish >"$fish_dir/sandbridge.fish"
  echo "dev.sh: completions installed for bash and fish; for zsh, add this line to ~/.zshrc" \
    "before compinit: fpath=(\"$zsh_dir\" \$fpath)"
}

# The whole suite on pytest-xdist, lint and types included (tests/test_lint.py): the tests
# wait on sandboxes, sockets and browsers more than they compute, so twice as many workers
# as cores keeps the cores busy; each test file runs whole on one worker, so its module
# fixtures (a browser, a session) start once. The files are handed out longest first, in
# the order tests/conftest.py sorts them from tests/file_seconds.json (tests/file_seconds.py
# says why), which xdist keeps with --no-loadscope-reorder. --fast leaves out what
# tests/conftest.py marks slow (real sandboxes, browsers, daemons, far machines, builds):
# the inner loop.
run_tests() {
  local arg args=() tier=()
  for arg in "$@"; do
    if [ "$arg" = --fast ]; then tier=(-m "not slow"); else args+=("$arg"); fi
  done
  local workers=$(($(nproc) * 2))
  if [ ${#tier[@]} -gt 0 ]; then
    # The fast tier computes more than it waits: one worker more than cores (each worker
    # also collects every test file; README, "Tests" has the times), and its property
    # tests and fuzzers run a quarter of the examples (the "fast" profile, tests/conftest.py).
    workers=$(($(nproc) + 1))
    export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-fast}
  fi
  workers=${SANDBRIDGE_TEST_WORKERS:-$workers}
  exec "$VENV/bin/python" -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder \
    "${tier[@]}" "${args[@]}"
}

command=${1:-demo}
shift || true
case "$command" in
  setup) setup_tests ;;
  demo)
    install_debian_packages "${DEMO_PACKAGES[@]}"
    install_python_packages
    # The demo app is in the package: its sandbox's workdir is an empty directory, not
    # this checkout, which holds .venv and src/ (sandbridge's own code, made read-only
    # inside with a warning, the demo's first line, when the workdir holds it).
    work=$(mktemp -d "${TMPDIR:-/tmp}/sandbridge-demo.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    "$VENV/bin/sandbridge" demo --workdir "$work" "$@"
    ;;
  install) install_for_user ;;
  test) setup_tests; run_tests "$@" ;;
  bench) setup; exec "$VENV/bin/python" -m benchmarks.relay_bench "$@" ;;
  tsan) setup_tests; exec "$VENV/bin/python" -m tests.relay.front.front_sanitizers thread ;;
  lock)
    setup
    pip_quiet "$VENV/bin/pip" install -q pip-tools
    # --allow-unsafe: setuptools is pinned too, for the packaging tests build without
    # network (--no-isolation) with the one this file names.
    "$VENV/bin/pip-compile" -q --allow-unsafe --extra dev --extra bench --strip-extras \
      --no-emit-index-url --no-emit-find-links -o requirements.lock pyproject.toml "$@"
    exec "$VENV/bin/pip-compile" -q --extra apps --strip-extras --no-emit-index-url \
      --no-emit-find-links -o requirements-apps.lock pyproject.toml "$@"
    ;;
  *)
    echo "usage: ./dev.sh [setup|demo [--open]|install|test [--fast] [pytest args]|bench [--smoke]|tsan|lock]" >&2
    exit 2
    ;;
esac
