#!/usr/bin/env bash
# tools/deps.sh — check the build dependencies; install them when we are root on Debian.
# Called by `make run` and `make test`. Exits non-zero (after printing the install line) when
# something is missing and cannot be installed here.
set -u
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
  exit 0
fi
line="apt-get install -y ${pkgs_needed[*]}"
if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
  echo "deps: installing ${pkgs_needed[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q "${pkgs_needed[@]}" || { apt-get update -q && apt-get install -y -q "${pkgs_needed[@]}"; }; } >&2 && exit 0
  echo "deps: installation failed; run: $line" >&2
  exit 1
fi
echo "deps: missing ${pkgs_needed[*]}. Install them with:" >&2
echo "  sudo $line" >&2
exit 1
