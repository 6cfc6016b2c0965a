#!/usr/bin/env bash
# leak-audit.sh: checks that nothing a pod network held outlives its pods.
# Run it as root after a test suite (make e2e runs it after the e2e tests) or
# on a node with no pods that should be left. It prints every leak it finds
# and exits 1 if there is any (2 on a usage error).
#
# Checks:
#   ipam        host-local allocations (files named after an IP) in the stores
#               under each IPAM dir whose holder is not a running container
#   veths       host veths attached to netshim's test bridges (nse2e*, nsconf*,
#               nsbench*, nskub*, and cbr0 when --bridge cbr0 is given), and veths whose
#               peer is in no other network namespace
#   iptables    portmap's per-pod state: rules of CNI-HOSTPORT-DNAT naming a
#               container and CNI-DN-* chains; the bridge plugin's per-pod
#               masquerade chains (CNI-<hash>) and rules naming a container; the
#               firewall plugin's per-pod CNI-FORWARD rules (IPv4 and IPv6). The
#               shared, empty CNI-HOSTPORT-* chains portmap never removes are not
#               leaks. With --cni-network NAME only the nat rules that name that
#               network (CNI's comment `name: "NAME"`) and the per-pod chains they
#               jump to count, and no filter rule: a run beside other suites (the
#               churn soak's) leaves their live pods' rules out.
#   containers  containers labelled netshim.io/type (pause and workload)
#   checkpoints files in ROOT/sandbox of each netshim root dir
#   cache       libcni cached results (CACHE/results) of containers that do not
#               exist
#   netns       pinned pod namespaces (--sandbox-netns=pinned|pauseless): files in
#               each netns dir, and, without --no-defaults, any namespace mount
#               (nsfs) named pod-*.net|ipc|uts|user or tmpfs named pod-*.shm anywhere,
#               and the OCI wrapper's idmapped rootfs (an overlay on netshim-rootfs) or
#               layer views (under .netshim-idmap) of a pod with hostUsers: false,
#               e.g. in a test's removed directory; a netns dir's own mount (netshim
#               makes each an unbindable mount and never unmounts it) is no leak
#   tmp         leftover e2e temp dirs (${TMPDIR:-/tmp}/nse2e*), whose stores and
#               checkpoints are audited too (with --e2e-tmp)
#
# Usage: leak-audit.sh [--ipam-dir DIR]... [--root-dir DIR]... [--cache-dir DIR]... [--netns-dir DIR]...
#                      [--bridge NAME]... [--e2e-tmp] [--skip CHECK]...
#                      [--no-defaults] [--container-filter FILTER] [--cni-network NAME]
# Defaults: --ipam-dir /var/lib/cni/networks, --root-dir /var/lib/netshim,
# --cache-dir /var/lib/cni/cache, --netns-dir /run/netshim/netns. The same lists
# can be given (space separated) in LEAK_AUDIT_IPAM_DIRS, LEAK_AUDIT_ROOT_DIRS,
# LEAK_AUDIT_CACHE_DIRS, LEAK_AUDIT_NETNS_DIRS and LEAK_AUDIT_BRIDGES; LEAK_AUDIT_SKIP names checks to skip.
# Per test or scenario: --no-defaults audits only the directories given, and
# --container-filter (a `docker ps --filter` value, e.g.
# label=netshim.io/pod-namespace=NS) only the containers it matches. Set
# DOCKER_HOST to audit against another engine (a test's private dockerd).
# The last line before the verdict counts the leaks per check:
#   leak-audit: counts ipam=N veths=N iptables=N containers=N checkpoints=N cache=N netns=N tmp=N
set -uo pipefail

usage() { sed -n '2,/^set /p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

read -r -a ipam_dirs <<<"${LEAK_AUDIT_IPAM_DIRS:-/var/lib/cni/networks}"
read -r -a root_dirs <<<"${LEAK_AUDIT_ROOT_DIRS:-/var/lib/netshim}"
read -r -a cache_dirs <<<"${LEAK_AUDIT_CACHE_DIRS:-/var/lib/cni/cache}"
read -r -a netns_dirs <<<"${LEAK_AUDIT_NETNS_DIRS:-/run/netshim/netns}"
read -r -a extra_bridges <<<"${LEAK_AUDIT_BRIDGES:-}"
read -r -a skip <<<"${LEAK_AUDIT_SKIP:-}"
e2e_tmp=0
container_filter=label=netshim.io/type
cni_network=
no_defaults=0
for a in "$@"; do [[ $a == --no-defaults ]] && no_defaults=1; done
if ((no_defaults)); then
  ipam_dirs=() root_dirs=() cache_dirs=() netns_dirs=()
fi
while (($#)); do
  case $1 in
    --ipam-dir) ipam_dirs+=("${2:?}"); shift 2 ;;
    --root-dir) root_dirs+=("${2:?}"); shift 2 ;;
    --cache-dir) cache_dirs+=("${2:?}"); shift 2 ;;
    --netns-dir) netns_dirs+=("${2:?}"); shift 2 ;;
    --bridge) extra_bridges+=("${2:?}"); shift 2 ;;
    --skip) skip+=("${2:?}"); shift 2 ;;
    --e2e-tmp) e2e_tmp=1; shift ;;
    --no-defaults) shift ;;
    --container-filter) container_filter=${2:?}; shift 2 ;;
    --cni-network) cni_network=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "leak-audit: unknown argument $1" >&2; usage ;;
  esac
done

leaks=0
declare -A counts=([ipam]=0 [veths]=0 [iptables]=0 [containers]=0 [checkpoints]=0 [cache]=0 [netns]=0 [tmp]=0)
leak() { echo "LEAK [$1] $2"; leaks=$((leaks + 1)); counts[$1]=$((${counts[$1]:-0} + 1)); }
skipped() { [[ " ${skip[*]} " == *" $1 "* ]]; }

have_docker=0
if command -v docker >/dev/null && timeout 10 docker version >/dev/null 2>&1; then
  have_docker=1
else
  echo "leak-audit: no Docker engine answers: container checks skipped, every held IP counts as a leak" >&2
fi

# running_ids: full IDs of running containers, one a line.
running_ids=$( ((have_docker)) && docker ps -q --no-trunc 2>/dev/null)
all_ids=$( ((have_docker)) && docker ps -aq --no-trunc 2>/dev/null)

if ((e2e_tmp)); then
  for d in "${TMPDIR:-/tmp}"/nse2e*; do
    [[ -d $d ]] || continue
    skipped tmp || leak tmp "e2e temp dir left behind: $d"
    [[ -d $d/ipam ]] && ipam_dirs+=("$d/ipam")
    [[ -d $d/root ]] && root_dirs+=("$d/root")
    [[ -d $d/cnicache ]] && cache_dirs+=("$d/cnicache")
  done
fi

# ---- host-local stores ----
if ! skipped ipam; then
  for dir in "${ipam_dirs[@]}"; do
    [[ -d $dir ]] || continue
    for store in "$dir"/*/; do
      [[ -d $store ]] || continue
      for f in "$store"*; do
        [[ -f $f ]] || continue
        ip=${f##*/}
        # Allocations are files named after the IP (IPv6 ones may hold ':');
        # lock and last_reserved_ip.N are not.
        [[ $ip =~ ^[0-9.]+$ || $ip =~ ^[0-9a-fA-F:]*:[0-9a-fA-F:.]*$ ]] || continue
        holder=$(head -n1 "$f" 2>/dev/null | tr -d '\r[:space:]')
        if [[ -n $holder ]] && grep -qx "$holder" <<<"$running_ids"; then
          continue
        fi
        leak ipam "$ip in ${store%/} held by ${holder:-nobody} (no such running container)"
      done
    done
  done
fi

# ---- veths ----
if ! skipped veths; then
  # Test bridges and the interfaces attached to them.
  mapfile -t bridges < <(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep -E '^(nse2e|nsconf|nsbench|nskub)[0-9]*$')
  bridges+=("${extra_bridges[@]}")
  for br in "${bridges[@]}"; do
    [[ -n $br ]] || continue
    ip link show "$br" >/dev/null 2>&1 || continue
    while read -r line; do
      [[ -n $line ]] || continue
      name=$(awk -F': ' '{print $2}' <<<"$line" | cut -d@ -f1)
      leak veths "$name attached to bridge $br"
    done < <(ip -o link show master "$br" 2>/dev/null)
  done
  # Veths whose peer is in no other namespace (a pod veth's peer is in
  # the pod's netns; the kernel deletes the pair with the netns).
  while read -r line; do
    [[ -n $line ]] || continue
    [[ $line == *link-netns* ]] && continue
    name=$(awk -F': ' '{print $2}' <<<"$line" | cut -d@ -f1)
    leak veths "$name has no peer in another network namespace: ${line:0:160}"
  done < <(ip -o link show type veth 2>/dev/null)
fi

# scope_nat RULES NETWORK: the rules (iptables -S lines) that name the CNI
# network in their comment, and the declarations and rules of the per-pod
# chains (CNI-DN-*, CNI-<hash>) those jump to.
scope_nat() {
  local rules=$1 name=$2 chains
  chains=$(grep -F "name: \\\"$name\\\"" <<<"$rules" | grep -oE -- '-j CNI-[A-Za-z0-9-]+' | awk '{print $2}' |
    grep -vE '^CNI-HOSTPORT-' | sort -u)
  grep -F "name: \\\"$name\\\"" <<<"$rules"
  [[ -n $chains ]] || return 0
  while read -r c; do
    grep -E -- "^-[NA] $c( |\$)" <<<"$rules"
  done <<<"$chains"
}

# ---- iptables ----
if ! skipped iptables; then
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    nat=$("$cmd" -w -t nat -S 2>/dev/null) || continue
    if [[ -n $cni_network ]]; then
      nat=$(scope_nat "$nat" "$cni_network")
    fi
    while read -r r; do
      [[ -n $r ]] || continue
      leak iptables "$cmd nat: $r"
    done < <(grep -E '^-N CNI-DN-|^-A CNI-HOSTPORT-DNAT .*(id: |-j CNI-DN-)|^-N CNI-[0-9a-f]{24}$|^-A [A-Z]+ .*name: .* id: ' <<<"$nat")
    [[ -z $cni_network ]] || continue
    filter=$("$cmd" -w -t filter -S CNI-FORWARD 2>/dev/null) || continue
    while read -r r; do
      [[ -n $r ]] || continue
      leak iptables "$cmd filter: $r"
    done < <(grep -E '^-A CNI-FORWARD .*(-s|-d) [0-9a-fA-F.:]+/(32|128)' <<<"$filter")
  done
fi

# ---- containers ----
if ! skipped containers && ((have_docker)); then
  while read -r l; do
    [[ -n $l ]] || continue
    leak containers "$l"
  done < <(docker ps -a --filter label=netshim.io/type --filter "$container_filter" --format '{{.ID}} {{.Label "netshim.io/type"}} {{.Names}} {{.Status}}')
fi

# ---- checkpoints ----
if ! skipped checkpoints; then
  for root in "${root_dirs[@]}"; do
    [[ -d $root/sandbox ]] || continue
    for f in "$root"/sandbox/*; do
      [[ -e $f ]] || continue
      leak checkpoints "$f"
    done
  done
fi

# ---- libcni cache ----
if ! skipped cache && ((have_docker)); then
  for dir in "${cache_dirs[@]}"; do
    [[ -d $dir/results ]] || continue
    for f in "$dir"/results/*; do
      [[ -f $f ]] || continue
      # NETWORK-CONTAINERID-IFNAME; the ID is the 64-hex field.
      id=$(grep -oE '(^|-)[0-9a-f]{64}(-|$)' <<<"${f##*/}" | tr -d '-' | head -n1)
      [[ -n $id ]] || continue
      grep -qx "$id" <<<"$all_ids" || leak cache "$f (container $id does not exist)"
    done
  done
fi

# ---- pinned netns ----
if ! skipped netns; then
  declare -A netns_seen=()
  for dir in "${netns_dirs[@]}"; do
    [[ -d $dir ]] || continue
    for f in "$dir"/*; do
      [[ -e $f ]] || continue
      netns_seen[$f]=1
      leak netns "$f"
    done
  done
  # Mount points (field 5 of mountinfo, octal-escaped) of namespace files
  # named as netshim names them, wherever they are.
  if ((!no_defaults)); then
    while read -r mp; do
      mp=$(printf '%b' "$mp")
      if [[ ${mp##*/} == netshim-rootfs || $mp == */.netshim-idmap/* ]]; then
        leak netns "$mp (an idmapped rootfs or layer view the OCI wrapper left mounted)"
        continue
      fi
      [[ ${mp##*/} == pod-*.@(net|ipc|uts|user|shm) && -z ${netns_seen[$mp]:-} ]] || continue
      leak netns "$mp (a pinned namespace or pod /dev/shm mount whose directory is gone or not audited)"
    done < <(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "nsfs" || $(i+1) == "tmpfs" || $(i+1) == "overlay" || index($5, "/.netshim-idmap/")) print $5; break }}' /proc/self/mountinfo)
  fi
fi

echo "leak-audit: counts ipam=${counts[ipam]} veths=${counts[veths]} iptables=${counts[iptables]} containers=${counts[containers]} checkpoints=${counts[checkpoints]} cache=${counts[cache]} netns=${counts[netns]} tmp=${counts[tmp]}"
if ((leaks)); then
  echo "leak-audit: $leaks leak(s) found"
  exit 1
fi
echo "leak-audit: no leaks (ipam: ${ipam_dirs[*]}; roots: ${root_dirs[*]}; caches: ${cache_dirs[*]}; netns: ${netns_dirs[*]})"
