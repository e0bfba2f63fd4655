#!/usr/bin/env bash
# tools/deps.sh [test] — check the build dependencies; install them when we are root on Debian.
# Called by `make run` (no argument) and `make test` (`test`). Exits non-zero (after printing
# the install line) when a build dependency is missing and cannot be installed here.
#
# With `test` it also sees to what some end-to-end tests need, which never fails the step:
# nginx (nginx-light, for tests/e2e/test_nginx.sh) and Open MPI (openmpi-bin and
# libopenmpi-dev: mpirun, and the MPI build of deltad that tests/e2e/test_mpi.sh drives; the
# Makefile's MPI=auto finds it), installed as root on Debian, and the
# official openai npm package in tests/e2e/node/node_modules (for test_openai_client.sh and
# test_chat_tools.sh), installed with npm when npm exists. What cannot be installed here is
# printed with the tests that will be skipped and the line that installs it.
set -u
mode=${1:-}
case "$mode" in "" | test) ;; *)
  echo "usage: tools/deps.sh [test]" >&2
  exit 2
  ;;
esac
cd "$(dirname "$0")/.."

# can_apt: root on Debian with apt-get, so we may install packages ourselves
can_apt() {
  [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null
}

# apt_install PKG...: install, running apt-get update once if the package lists are stale
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  { timeout 600 apt-get install -y -q "$@" ||
    { timeout 300 apt-get update -q && timeout 600 apt-get install -y -q "$@"; }; } >&2
}

# ---- build dependencies (make run, make test) ---------------------------------------------
pkgs_needed=()
need() { # need PKGCONFIG_NAME DEBIAN_PACKAGE
  pkg-config --exists "$1" 2>/dev/null || pkgs_needed+=("$2")
}
command -v pkg-config >/dev/null 2>&1 || pkgs_needed+=(pkg-config)
need libmicrohttpd libmicrohttpd-dev
need libcjson libcjson-dev
need hwloc libhwloc-dev
command -v cc >/dev/null 2>&1 || pkgs_needed+=(build-essential)
if [ ${#pkgs_needed[@]} -eq 0 ]; then
  echo "deps: ✓ libmicrohttpd ✓ cJSON ✓ hwloc ✓ pkg-config"
else
  line="apt-get install -y ${pkgs_needed[*]}"
  if can_apt; then
    echo "deps: installing ${pkgs_needed[*]}"
    apt_install "${pkgs_needed[@]}" || { echo "deps: installation failed; run: $line" >&2; exit 1; }
  else
    echo "deps: missing ${pkgs_needed[*]}. Install them with:" >&2
    echo "  sudo $line" >&2
    exit 1
  fi
fi
[ "$mode" = test ] || exit 0

# ---- test dependencies (make test only; a missing one skips tests, never fails) ------------
have_nginx() {
  command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]
}
if have_nginx; then
  echo "deps: ✓ nginx"
else
  if can_apt; then
    echo "deps: installing nginx-light (for tests/e2e/test_nginx.sh)"
    apt_install nginx-light || true
  fi
  if have_nginx; then
    echo "deps: ✓ nginx"
  else
    echo "deps: ✗ nginx: tests/e2e/test_nginx.sh will be skipped. Install it with:" >&2
    echo "  sudo apt-get install -y nginx-light" >&2
  fi
fi

have_mpi() {
  command -v mpirun >/dev/null 2>&1 && pkg-config --exists ompi-c 2>/dev/null
}
if have_mpi; then
  echo "deps: ✓ Open MPI"
else
  if can_apt; then
    echo "deps: installing openmpi-bin libopenmpi-dev (for tests/e2e/test_mpi.sh)"
    apt_install openmpi-bin libopenmpi-dev || true
  fi
  if have_mpi; then
    echo "deps: ✓ Open MPI"
  else
    echo "deps: ✗ Open MPI: deltad is built without MPI and tests/e2e/test_mpi.sh will be" \
      "skipped. Install it with:" >&2
    echo "  sudo apt-get install -y openmpi-bin libopenmpi-dev" >&2
  fi
fi

if python3 -c 'import jsonschema' >/dev/null 2>&1; then
  echo "deps: ✓ python3-jsonschema"
else
  if can_apt; then
    echo "deps: installing python3-jsonschema (for tests/e2e/test_structured.sh)"
    apt_install python3-jsonschema || true
  fi
  if python3 -c 'import jsonschema' >/dev/null 2>&1; then
    echo "deps: ✓ python3-jsonschema"
  else
    echo "deps: ✗ python3-jsonschema: tests/e2e/test_structured.sh will be skipped. Install it with:" >&2
    echo "  sudo apt-get install -y python3-jsonschema" >&2
  fi
fi

node_dir=tests/e2e/node
npm_line="npm install --prefix $node_dir --no-audit --no-fund --loglevel=error"
have_npm_pkgs() { [ -d "$node_dir/node_modules/openai" ] && [ -d "$node_dir/node_modules/@anthropic-ai/sdk" ]; }
if have_npm_pkgs; then
  echo "deps: ✓ openai and @anthropic-ai/sdk npm packages"
else
  if command -v npm >/dev/null 2>&1; then
    echo "deps: $npm_line (for test_openai_client.sh, test_chat_tools.sh, test_responses_messages.sh)"
    timeout 300 $npm_line >&2 || true
  fi
  if have_npm_pkgs; then
    echo "deps: ✓ openai and @anthropic-ai/sdk npm packages"
  else
    echo "deps: ✗ npm packages: tests/e2e/test_openai_client.sh, test_chat_tools.sh and" \
      "test_responses_messages.sh will be skipped. Install them with:" >&2
    command -v npm >/dev/null 2>&1 || echo "  sudo apt-get install -y nodejs npm" >&2
    echo "  $npm_line" >&2
  fi
fi
exit 0
