#!/usr/bin/env bash
# make test-stress: the locked suite (make test) five times in a fresh clone of HEAD, the
# way a loaded or a small machine runs it:
#   1-3. beside two CPU burners (busy loops, one a core);
#   4.   pinned to one core (taskset -c 0);
#   5.   in a random order (pytest-random-order; the seed is printed), to find tests that
#        lean on each other.
# Each pass prints its result and time; the summary ends the output, and the exit status
# is 1 unless all five passed. Not part of .ci/run (about an hour); its last result and
# date go in docs/development.md.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/netdisco-stress-XXXXXX)"
git clone -q "$here" "$work/clone"
cd "$work/clone"
echo "stress: fresh clone of $(git rev-parse --short HEAD) in $work/clone on $(nproc) cores"

burners=()
burn() { for _ in 1 2; do (while :; do :; done) & burners+=($!); done; }
calm() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done; burners=(); }
trap 'calm' EXIT

results=()
pass() {  # name, then the command
  local name=$1; shift
  local log="$work/$name.log" began=$SECONDS status
  echo "=== stress: $name"
  "$@" >"$log" 2>&1
  status=$?
  local summary
  summary="$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -1 | tr -d '=' | xargs)"
  results+=("$(printf '%-22s %-6s %5d s  %s' "$name" "$([ $status = 0 ] && echo ok || echo FAIL)" \
    $((SECONDS - began)) "${summary:-see $log}")")
  echo "${results[-1]}"
  [ $status = 0 ] || tail -40 "$log"
}

make -s .venv/.installed system-deps >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
for n in 1 2 3; do
  burn
  pass "burners-$n" make test
  calm
done
pass "one-core" taskset -c 0 make test
seed=$RANDOM
pass "random-order-$seed" make test PYTEST_ARGS="--random-order-bucket=global --random-order-seed=$seed"

echo
echo "stress summary ($(date -u +%Y-%m-%d), $(git rev-parse --short HEAD), logs in $work):"
printf '  %s\n' "${results[@]}"
failed=$(printf '%s\n' "${results[@]}" | grep -c ' FAIL ')
[ "$failed" = 0 ]
