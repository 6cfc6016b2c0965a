#!/usr/bin/env bash
# hack/verify-units.sh
#
# Checks deploy/systemd/netshim.socket and netshim.service with `systemd-analyze
# verify` (no systemd PID 1 needed), and the shape of deploy/default/netshim. Part
# of `make lint`. verify prints warnings (an unknown key, a value it cannot
# parse) and still exits 0: any output fails this check.
#
# verify checks that ExecStart's binary is executable, and the packaged path,
# /usr/bin/netshim, need not exist here: a copy of the service runs a stand-in
# instead. The units' dependencies are resolved against a stub docker.service
# first in the unit path (SYSTEMD_UNIT_PATH, then the system's directories for
# the targets), so the check is the same with or without docker.io installed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
UNITS=$ROOT/deploy/systemd
DEFAULTS=$ROOT/deploy/default/netshim
EXEC='ExecStart=/usr/bin/netshim $NETSHIM_OPTS'

if ! command -v systemd-analyze >/dev/null; then
  echo "verify-units: systemd-analyze not found (Debian: apt-get install systemd)" >&2
  exit 1
fi
# The package installs the binary and the conffile where the unit expects them.
if [[ $(grep -cxF "$EXEC" "$UNITS/netshim.service") -ne 1 ]]; then
  echo "verify-units: netshim.service must have exactly one line '$EXEC'" >&2
  exit 1
fi
if [[ $(grep -cE '^[^#[:space:]]' "$DEFAULTS") -ne 1 ]] || ! grep -qE '^NETSHIM_OPTS="[^"]*"$' "$DEFAULTS"; then
  echo "verify-units: $DEFAULTS must assign NETSHIM_OPTS=\"...\" and nothing else (comments aside)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$UNITS/netshim.socket" "$UNITS/netshim.service" "$tmp/"
mkdir "$tmp/bin"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/netshim"
chmod +x "$tmp/bin/netshim"
sed -i "s|^ExecStart=/usr/bin/netshim |ExecStart=$tmp/bin/netshim |" "$tmp/netshim.service"
printf '[Unit]\nDescription=stub Docker for verify-units\n[Service]\nType=notify\nExecStart=%s\n' \
  "$tmp/bin/netshim" >"$tmp/docker.service"

rc=0
out=$(SYSTEMD_UNIT_PATH="$tmp:" systemd-analyze verify "$tmp/netshim.socket" "$tmp/netshim.service" 2>&1) || rc=$?
if [[ $rc -ne 0 || -n "$out" ]]; then
  echo "verify-units: systemd-analyze verify (exit $rc) on deploy/systemd:" >&2
  echo "${out//$tmp/deploy/systemd}" >&2
  exit 1
fi
echo "verify-units: netshim.socket, netshim.service and default/netshim OK"
