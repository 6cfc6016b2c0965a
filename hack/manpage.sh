#!/usr/bin/env bash
# Renders netshim(8) from deploy/man/netshim.8.in: the OPTIONS section is made
# from the binary's own `--help`, so the page lists exactly the flags the
# binary has.
#   hack/manpage.sh NETSHIM_BINARY VERSION DATE >netshim.8
# DATE (YYYY-MM-DD) is the commit's date, for a reproducible page.
set -euo pipefail

bin=${1:?usage: $0 NETSHIM_BINARY VERSION DATE}
version=${2:?usage: $0 NETSHIM_BINARY VERSION DATE}
date=${3:?usage: $0 NETSHIM_BINARY VERSION DATE}
template="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/deploy/man/netshim.8.in"

# options turns cobra's "Flags:" block, one flag a line:
#       --cni-bin-dir string   Comma-separated list ... (default "/opt/cni/bin")
#   -v, --v Level              number for the log level verbosity
# into one .TP paragraph per flag. The spec and the description are
# separated by two or more spaces; a line that does not start with "-" after
# its indentation continues the description above it.
options() {
  "$bin" --help | awk '
    function esc(s) { gsub(/\\/, "\\e", s); return s }
    function flush() {
      if (spec == "") return
      print ".TP"
      print spec
      d = esc(desc)
      if (d ~ /^[.\047]/) d = "\\&" d
      print d
      spec = ""; desc = ""
    }
    /^Flags:/ { inflags = 1; next }
    !inflags { next }
    /^[[:space:]]*$/ { flush(); exit }
    {
      line = $0
      sub(/^[[:space:]]+/, "", line)
      if (line !~ /^-/) { desc = desc " " line; next }
      flush()
      split(line, parts, /  +/)
      s = esc(parts[1])
      desc = substr(line, length(parts[1]) + 1)
      sub(/^[[:space:]]+/, "", desc)
      # "-v, --v Level": the names bold, the value type italic.
      n = split(s, words, " ")
      spec = ""
      for (i = 1; i <= n; i++) {
        w = words[i]
        gsub(/-/, "\\-", w)
        spec = spec (i > 1 ? " " : "") (w ~ /^\\-/ ? "\\fB" w "\\fR" : "\\fI" w "\\fR")
      }
    }
    END { flush() }
  '
}

opts=$(options)
if [[ -z "$opts" ]]; then
  echo "manpage.sh: found no flags in '$bin --help'" >&2
  exit 1
fi
while IFS= read -r line; do
  if [[ "$line" == "@OPTIONS@" ]]; then
    printf '%s\n' "$opts"
  else
    line=${line//@VERSION@/$version}
    printf '%s\n' "${line//@DATE@/$date}"
  fi
done <"$template"
