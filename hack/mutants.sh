#!/usr/bin/env bash
# Mutation check of the whole-system models (package systemtest).
#
# Each systemtest/mutants/*.sed disables one guard: its "# file:" line
# names the file it edits, its "# guard:" line what it removes, and its sed
# commands the edit. A mutant with a "# test: DIR PATTERN" line is checked
# by the tests of package DIR matching PATTERN instead of the models (the
# framework plugin's preemption guards, which the models do not reach). For every mutant this script copies the working tree
# (tracked and untracked files that git does not ignore) to a scratch
# directory, applies the edit there (never to your tree), checks that it
# changed the file and still builds, and runs each model with fixed seeds.
# A mutant is "caught" when a model fails on some seed; the model and seed
# that caught it are reported, and rapid's fail file (kept under RESULTS)
# replays the failure with go test ./systemtest -run MODEL
# -rapid.failfile=FILE in a tree with the same mutant applied. The script
# replays each failure that way once and reports "replays" or "DOES NOT
# REPLAY".
#
# Run it when a guard or the model changes (CONTRIBUTING.md); every mutant
# should be caught. It is slow: the device-plugin model runs its real
# plugin at a few sequences per second on a quiet machine.
#
# Usage: hack/mutants.sh [mutant-name ...]
# Environment:
#   SEEDS          seeds to run (default "1 2")
#   DP_CHECKS      TestDevicePlugin sequences per seed (default 500)
#   SYSTEM_CHECKS  TestSystem sequences per seed (default 500)
#   MODELS         models to run (default "TestDevicePlugin TestSystem")
#   RESULTS        directory for each run's log (default: a new temporary one)
#
# "not replayable" marks a failure rapid could not reproduce while
# shrinking (see systemtest/doc.go, "Replaying a failure").
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${SEEDS:-"1 2"}
DP_CHECKS=${DP_CHECKS:-500}
SYSTEM_CHECKS=${SYSTEM_CHECKS:-500}
MODELS=${MODELS:-"TestDevicePlugin TestSystem"}

mutants=()
if [ $# -gt 0 ]; then
  for m in "$@"; do mutants+=("systemtest/mutants/$m.sed"); done
else
  mutants=(systemtest/mutants/*.sed)
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
RESULTS=${RESULTS:-$(mktemp -d)}
mkdir -p "$RESULTS"
echo "logs: $RESULTS"

checks_for() {
  case $1 in
    TestDevicePlugin) echo "$DP_CHECKS" ;;
    *) echo "$SYSTEM_CHECKS" ;;
  esac
}

# replay TREE MODEL DIR runs MODEL once more in TREE from the fail file
# rapid left in DIR, and says whether the failure came back.
replay() {
  local file out
  file=$(find "$3" -name '*.fail' 2>/dev/null | head -1)
  if [ -z "$file" ]; then
    echo "no fail file"
    return
  fi
  # Not piped into grep -q: under pipefail the failing go test would
  # decide the pipeline's status.
  out=$(cd "$1" && go test -count=1 ./systemtest -run "^$2\$" -rapid.checks=1 -rapid.failfile="$file" 2>&1 || true)
  if grep -q 'failed after 0 tests' <<<"$out"; then
    echo "replays"
  else
    echo "DOES NOT REPLAY"
  fi
}

# run_test NAME TREE DIR PATTERN runs, for a mutant whose guard lives
# outside the models' reach (a "# test: DIR PATTERN" line, such as the
# framework plugin's preemption guards in its own module), the tests of
# package DIR matching PATTERN once: they are deterministic, so there is
# no seed and nothing to replay.
run_test() {
  local log="$RESULTS/$1-test.log"
  if ! (cd "$2/$3" && go vet . >/dev/null 2>&1); then
    printf '%-22s %-10s %s\n' "$1" "BROKEN" "the mutant does not build"
    return
  fi
  (cd "$2/$3" && go test -count=1 -run "$4" . >"$log" 2>&1) || true
  if grep -q -- '^--- FAIL' "$log"; then
    printf '%-22s %-10s %s\n' "$1" "caught" "$(grep -m1 -- '^--- FAIL' "$log" | sed 's/^--- FAIL: //') in $3"
  else
    printf '%-22s %-10s %s\n' "$1" "NOT CAUGHT" "$(sed -n 's/^# guard: //p' "systemtest/mutants/$1.sed")"
  fi
}

printf '%-22s %-10s %s\n' mutant result detail
for m in "${mutants[@]}"; do
  name=$(basename "$m" .sed)
  file=$(sed -n 's/^# file: //p' "$m")
  tree="$scratch/$name"
  mkdir -p "$tree"
  git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$tree"
  cp "$tree/$file" "$tree/$file.orig"
  sed -i -f "$m" "$tree/$file"
  if cmp -s "$tree/$file" "$tree/$file.orig"; then
    printf '%-22s %-10s %s\n' "$name" "STALE" "the edit no longer matches $file: update the mutant"
    continue
  fi
  rm "$tree/$file.orig"
  test=$(sed -n 's/^# test: //p' "$m")
  if [ -n "$test" ]; then
    run_test "$name" "$tree" "${test%% *}" "${test#* }"
    rm -rf "$tree"
    continue
  fi
  if ! (cd "$tree" && go vet ./systemtest >/dev/null 2>&1); then
    printf '%-22s %-10s %s\n' "$name" "BROKEN" "the mutant does not build"
    continue
  fi
  caught=""
  for model in $MODELS; do
    for seed in $SEEDS; do
      log="$tree/$model-$seed.log"
      # rapid stops drawing, and passes, once the test's deadline nears:
      # without a long -timeout a slow run would check fewer sequences
      # than asked.
      (cd "$tree" && go test -count=1 -timeout 6h ./systemtest -run "^$model\$" \
        -rapid.seed="$seed" -rapid.checks="$(checks_for "$model")" >"$log" 2>&1) || true
      # A failed invariant counts, also one rapid could not replay
      # ("flaky"); a coverage failure (a path never reached) does not.
      cp "$log" "$RESULTS/$name-$model-$seed.log"
      # Keep the fail file for replay, away from the next seed's run
      # (rapid replays a fail file it finds before drawing new sequences).
      if [ -d "$tree/systemtest/testdata/rapid" ]; then
        mv "$tree/systemtest/testdata/rapid" "$RESULTS/$name-$model-$seed.rapid"
      fi
      if grep -q -- '^--- FAIL' "$log" && ! grep -q 'was never reached' "$log"; then
        how=$(grep -o 'failed after [0-9]* tests' "$log" | head -1 || true)
        if grep -q 'flaky test, can not reproduce' "$log"; then
          how="not replayable"
        elif [ -n "$how" ]; then
          how="$how, $(replay "$tree" "$model" "$RESULTS/$name-$model-$seed.rapid")"
        fi
        caught="$caught $model(seed $seed, ${how:-failed})"
      elif grep -q '^panic: ' "$log"; then
        # A crash ends the test binary before rapid can shrink it or
        # write a fail file: the mutant is caught, but by nothing that
        # replays. A mutant should disable its guard, not crash.
        caught="$caught $model(seed $seed, crashed, no fail file)"
      fi
    done
  done
  if [ -n "$caught" ]; then
    printf '%-22s %-10s %s\n' "$name" "caught" "$caught"
  else
    printf '%-22s %-10s %s\n' "$name" "NOT CAUGHT" "$(sed -n 's/^# guard: //p' "$m")"
  fi
  rm -rf "$tree"
done
