#!/usr/bin/env bash
# hack/cni-config.sh [CONF_DIR]
#
# Writes netshim's dev default CNI network (10-netshim.conflist: bridge "netshim0",
# host-local 10.88.0.0/16, portmap, firewall) into CONF_DIR (default /etc/cni/net.d),
# but only when CONF_DIR holds no network config (*.conf, *.conflist, *.json) yet:
# an existing CNI setup is never changed.
set -euo pipefail

CONF_DIR=${1:-/etc/cni/net.d}

shopt -s nullglob
existing=("$CONF_DIR"/*.conf "$CONF_DIR"/*.conflist "$CONF_DIR"/*.json)
if ((${#existing[@]} > 0)); then
  exit 0
fi

mkdir -p "$CONF_DIR"
tmp=$(mktemp "$CONF_DIR/.10-netshim.conflist.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cat >"$tmp" <<'JSON'
{
  "cniVersion": "1.0.0",
  "name": "netshim",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "netshim0",
      "isGateway": true,
      "ipMasq": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "10.88.0.0/16" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    },
    {
      "type": "firewall"
    }
  ]
}
JSON
chmod 0644 "$tmp"
# The temp name does not end in .conflist, so a watcher never loads a partial file.
mv -f "$tmp" "$CONF_DIR/10-netshim.conflist"
trap - EXIT
echo "cni-config.sh: wrote the dev default network to $CONF_DIR/10-netshim.conflist"
