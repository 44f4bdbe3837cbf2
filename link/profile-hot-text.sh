#!/usr/bin/env bash
# Regenerates link/hot-text.txt: the functions a server runs, hottest first, which the
# `pi-workflows` binary's link places together before the rest of its code (build.rs).
#
# Why: the kernel maps a binary's code 64 KiB around each first touch ("fault-around"), so
# code scattered through the 8 MB text left ~6 MB of it resident in a fresh server and ~7.5 MB
# after a load. Placed together, what a server runs is a few MB and the rest is never mapped.
#
# How: a uprobe on every function of a release build counts its calls (exact, unlike
# sampling) while the server starts, runs the benchmark's workload and serves the CLI's
# common commands. Names are written as patterns that ignore what changes from build to
# build (legacy hashes, v0 crate disambiguators and back-references, LTO's numeric
# suffixes), so the file keeps matching across dependency updates and code changes; a
# function it misses is only placed with the rest.
#
# Needs: root (tracefs uprobes), binutils, a release build with its examples and the built
# npm package:
#   cargo build --release --locked --bins --examples && npm --prefix packages/pi-workflows run build
#   sudo link/profile-hot-text.sh [target/release/pi-workflows]
# It takes about fifteen minutes: each call traps into the kernel while the probes are on, and
# removing ~9,000 probes that were enabled takes the kernel a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(realpath "${1:-target/release/pi-workflows}")
bench=target/release/examples/bench_e2e
out=link/hot-text.txt
group=piw_hot_text
tracefs=/sys/kernel/tracing
# The script's limit: a profile is one list of patterns, not a list of every function.
patterns_max=20000

[ -x "$binary" ] || { echo "profile-hot-text: no binary at $binary; build it first (cargo build --release --locked --bins --examples)" >&2; exit 1; }
[ -x "$bench" ] || { echo "profile-hot-text: no $bench; build the examples (cargo build --release --locked --examples)" >&2; exit 1; }
[ -d packages/pi-workflows/dist ] || { echo "profile-hot-text: build the npm package first (npm --prefix packages/pi-workflows run build)" >&2; exit 1; }
[ -w "$tracefs/uprobe_events" ] || mount -t tracefs nodev "$tracefs" 2>/dev/null || true
[ -w "$tracefs/uprobe_events" ] || { echo "profile-hot-text: $tracefs/uprobe_events is not writable; run as root on a kernel with uprobe events" >&2; exit 1; }

work=$(mktemp -d /tmp/piw-hot-text.XXXXXX)
tracing_on_before=$(cat "$tracefs/tracing_on")
cleanup() {
  echo 0 > "$tracefs/events/$group/enable" 2>/dev/null || true
  echo "$tracing_on_before" > "$tracefs/tracing_on" 2>/dev/null || true
  grep "^p:$group/" "$tracefs/uprobe_events" 2>/dev/null | sed 's/^p:\([^ ]*\).*/-:\1/' > "$work/removals" || true
  if exec 4>> "$tracefs/uprobe_events"; then
    while read -r removal; do printf '%s\n' "$removal" >&4 || true; done < "$work/removals"
    exec 4>&-
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. A probe at every function's entry: file offset = address - segment address + segment offset.
readelf -lW "$binary" | awk '$1 == "LOAD" && / E +0x/ { print $2, $3, $6 }' > "$work/segments"
nm -S --defined-only --no-demangle "$binary" | awk '$3 ~ /^[tTwW]$/ && $2 !~ /^0+$/ { print $1, $4 }' |
  sort -u -k1,1 > "$work/functions"
# x86 uprobes refuse an instruction with a lock or segment prefix (tokio's waker `park::clone`
# starts with `lock incq`), so such a function is probed at its second instruction, which
# every call runs too: a prefixed instruction is never a jump.
objdump -d --no-show-raw-insn "$binary" | awk '
  /^[0-9a-f]+ <[^>]*>:$/ { entry = $1; line = 0; next }
  entry != "" && /^ +[0-9a-f]+:\t/ {
    line++
    split($0, parts, "\t")
    if (line == 1 && parts[2] !~ /^(lock|cs|ds|es|ss|notrack) /) entry = ""
    else if (line == 2) { address = $1; sub(/:$/, "", address); print entry, address; entry = "" }
  }' > "$work/moved"
awk -v group="$group" -v binary="$binary" -v moved_file="$work/moved" -v segments_file="$work/segments" '
  # mawk has no strtonum; the addresses fit a double exactly.
  function hex(text,   i, value) {
    sub(/^0x/, "", text)
    value = 0
    for (i = 1; i <= length(text); i++) value = value * 16 + index("0123456789abcdef", substr(tolower(text), i, 1)) - 1
    return value
  }
  FILENAME == moved_file { moved[$1] = hex($2); next }
  FILENAME == segments_file { offset[FNR] = hex($1); vaddr[FNR] = hex($2); size[FNR] = hex($3); segments = FNR; next }
  {
    address = ($1 in moved) ? moved[$1] : hex($1)
    for (s = 1; s <= segments; s++) if (address >= vaddr[s] && address < vaddr[s] + size[s]) {
      printf "p:%s/f%d %s:0x%x\n", group, FNR, binary, address - vaddr[s] + offset[s] > probes
      printf "f%d %s\n", FNR, $2 > names
    }
  }' probes="$work/probes" names="$work/names" "$work/moved" "$work/segments" "$work/functions"
echo "profile-hot-text: $(wc -l < "$work/probes") functions probed ($(wc -l < "$work/moved") past a prefix)"
# One write per probe on one open file: the kernel parses each write on its own (a line cut by
# a buffered write would be refused), and opening the file again for each is slow.
exec 3>> "$tracefs/uprobe_events"
while read -r probe; do printf '%s\n' "$probe" >&3; done < "$work/probes"
exec 3>&-
echo 0 > "$tracefs/tracing_on"  # count hits only; nothing is recorded
echo 1 > "$tracefs/events/$group/enable"

# 2. The workload: the benchmark (start, warm runs, sequential and concurrent runs, polled
# and watched) and the CLI's common commands on a server of its own.
# A server in this checkout finds the package from its own place, as a user's server does
# (a path the profile would miss if told where the package is); one from elsewhere is told.
case "$binary" in
  "$PWD"/*) unset PI_WORKFLOWS_PACKAGE_DIR ;;
  *) export PI_WORKFLOWS_PACKAGE_DIR="$PWD/packages/pi-workflows" ;;
esac
# Two benchmarks: the plain workload long enough for the concurrent phases' rarer paths (a
# full warm pool, queued runs, admissions given back) and with the idle phase that follows
# it, then one whose steps return new values while finished runs stay watched.
env -u NODE_EXTRA_CA_CERTS PI_WORKFLOWS_BIN="$binary" "$bench" --sequential 100 --seconds 6 > "$work/bench.txt"
env -u NODE_EXTRA_CA_CERTS PI_WORKFLOWS_BIN="$binary" "$bench" --sequential 20 --seconds 2 \
  --bystanders 20 --fresh-outputs >> "$work/bench.txt"
cp "$tracefs/uprobe_profile" "$work/profile-server"
mkdir -p "$work/project/.pi/workflows"
cp examples/workflows/repo-facts.workflow.ts "$work/project/.pi/workflows/"
(
  cd "$work/project"
  cli() { "$binary" --state-dir "$work/state" "$@"; }
  cli server start
  cli workflows
  cli run start repo-facts --follow > /dev/null
  run_id=$(cli runs | awk 'NR == 1 { print $1 }')
  cli run status "$run_id"
  cli view "$run_id"
  cli run restart "$run_id"
  cli runs
  cli server status --tree
  cli state status
  cli state verify
  cli server stop
) > "$work/cli.txt"
echo 0 > "$tracefs/events/$group/enable"

cp "$tracefs/uprobe_profile" "$work/profile-all"

# 3. The functions that ran, as section patterns: first those the benchmark's server ran, by
# calls (ties by name), then those only the CLI's commands added (the CLI's own code and what
# serving them took), so a server's start touches as little of the CLI's code as it can.
awk '$2 ~ /^f[0-9]+$/ { print $2, $3 }' "$work/profile-server" > "$work/hits-server"
awk '$2 ~ /^f[0-9]+$/ { print $2, $3 }' "$work/profile-all" > "$work/hits-all"
awk 'FILENAME == ARGV[1] { name[$1] = $2; next }
     FILENAME == ARGV[2] { server[$1] = $2; next }
     $2 > 0 && server[$1] > 0 { print 0, server[$1], name[$1] }
     $2 > 0 && server[$1] == 0 { print 1, $2, name[$1] }' "$work/names" "$work/hits-server" "$work/hits-all" > "$work/hits"
sort -k1,1n -k2,2nr -k3,3 "$work/hits" | awk '{ print $3 }' |
  sed -E -e 's/17h[0-9a-f]{16}E$/17h*E/' \
    -e '/^_R/ s/Cs[0-9A-Za-z]+_/Cs*_/g' -e '/^_R/ s/B[0-9A-Za-z]*_/B*_/g' \
    -e 's/\.llvm\.[0-9]+$/.llvm.*/' -e 's/\.[0-9]+$/.*/' |
  awk '!seen[$0]++' | head -n "$patterns_max" > "$work/patterns"
{
  echo "# Generated by link/profile-hot-text.sh: the functions a server ran, hottest first, as"
  echo "# section-name patterns (* stands for what changes between builds). build.rs links them"
  echo "# first in the pi-workflows binary. Regenerate rather than edit."
  cat "$work/patterns"
} > "$out"
echo "profile-hot-text: $(wc -l < "$work/hits") functions ran; $(wc -l < "$work/patterns") patterns written to $out"
