#!/usr/bin/env bash
# test_units.sh BUILD_DIR — the systemd units pass `systemd-analyze verify` (no warning at all),
# and `make install` into a DESTDIR lays out the binary, units, configs, and keeps an existing
# /etc/deltad/deltad.conf. Skips the verify part where systemd-analyze is absent.
set -u
B=${1:?usage: test_units.sh BUILD_DIR}
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0 skipped=""
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }

if command -v systemd-analyze >/dev/null 2>&1; then
  # verify wants ExecStart to exist: point it at the build's binary
  bin=$(cd "$(dirname "$B/deltad")" && pwd)/deltad
  for u in deltad.service deltad@.service; do
    sed "s|/usr/local/bin/deltad|$bin|" "systemd/$u" >"$tmp/$u"
  done
  cp "$tmp/deltad@.service" "$tmp/deltad@example.service"
  out=$(cd "$tmp" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no \
        ./deltad.service ./deltad@example.service 2>&1)
  if [ -z "$out" ]; then ok; else bad "systemd-analyze verify:"; echo "$out" | sed 's/^/  | /'; fi
  for u in deltad.service deltad@.service; do
    for k in Type=notify WatchdogSec= NoNewPrivileges=yes ProtectSystem=strict MemoryDenyWriteExecute=yes \
             "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" Restart=on-failure; do
      grep -q "^$k" "systemd/$u" && ok || bad "$u lacks $k"
    done
  done
else
  skipped="systemd-analyze absent"
fi

d=$tmp/root
mkdir -p "$d/etc/deltad"
echo "port = 1" >"$d/etc/deltad/deltad.conf"
if make --no-print-directory -s -o "$B/deltad" install DESTDIR="$d" PREFIX=/opt/dd B="$B" >"$tmp/install.log" 2>&1; then ok
else bad "make install"; sed 's/^/  | /' "$tmp/install.log"; fi
for f in opt/dd/bin/deltad opt/dd/lib/systemd/system/deltad.service opt/dd/lib/systemd/system/deltad@.service \
         opt/dd/share/deltad/deltad.conf.example opt/dd/share/deltad/deltad.env.example; do
  [ -f "$d/$f" ] && ok || bad "install did not create /$f"
done
grep -q "^ExecStart=/opt/dd/bin/deltad serve --config /etc/deltad/deltad.conf" \
  "$d/opt/dd/lib/systemd/system/deltad.service" && ok || bad "installed unit ExecStart not rewritten to PREFIX"
[ "$(cat "$d/etc/deltad/deltad.conf")" = "port = 1" ] && ok || bad "install overwrote /etc/deltad/deltad.conf"
rm "$d/etc/deltad/deltad.conf"
make --no-print-directory -s -o "$B/deltad" install DESTDIR="$d" PREFIX=/opt/dd B="$B" >/dev/null 2>&1
cmp -s "$d/etc/deltad/deltad.conf" config/deltad.conf.example && ok || bad "install did not create /etc/deltad/deltad.conf"

[ -n "$skipped" ] && echo "note: verify skipped ($skipped)"
echo "test_units: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
