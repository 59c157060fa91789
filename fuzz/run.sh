#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Build and run the libFuzzer targets for a bounded time each.  TEST-ONLY.
#
#   fuzz/run.sh [-t SECONDS] [-j PARALLEL] [TARGET...]
#
#   TARGET     key, hash, record, roundtrip, entry, keyscan (default: all)
#   -t N       seconds per target (default $FUZZ_SECONDS, else 20)
#   -j N       targets run at once (default $FUZZ_JOBS, else 2)
#
# Each target first replays the reproducers kept in fuzz/repro/<target>/
# (every one must pass: they are the bugs found so far), then fuzzes from
# the seeds in fuzz/corpus/<target>/ plus a working corpus in
# build/fuzz/corpus/<target>/ (kept between runs, never in the repo).
# A crash leaves its input in build/fuzz/artifacts/; copy it to
# fuzz/repro/<target>/ to keep it.  Prints libFuzzer's figures (executions,
# executions per second, coverage) for every target and exits non-zero if
# any target failed.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/build/fuzz
ALL=(key hash record roundtrip entry keyscan)

secs=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-2}

while getopts t:j: opt; do
    case $opt in
        t) secs=$OPTARG ;;
        j) jobs=$OPTARG ;;
        *) sed -n '5,23p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")

for t in "${targets[@]}"; do
    [ -f "$ROOT/fuzz/fuzz_$t.c" ] || { echo "fuzz: no target '$t' (${ALL[*]})" >&2; exit 2; }
done

"$ROOT/fuzz/build.sh" || exit 1

mkdir -p "$OUT/artifacts" "$OUT/logs"
exec 6>"$OUT/.run.lock"
flock -n 6 || { echo "fuzz: waiting for another fuzz run in this checkout..." >&2; flock 6; }

# per-target libFuzzer options
opts() {
    case $1 in
        hash)      echo "-max_len=20000" ;;
        *)         echo "" ;;
    esac
}

run_one() {
    local t=$1 bin=$OUT/fuzz_$1 log=$OUT/logs/$1.log res=$OUT/logs/$1.result
    local repro=$ROOT/fuzz/repro/$t dict=$ROOT/fuzz/$t.dict f rc
    local -a args

    : > "$log"

    # 1. the kept reproducers: regressions
    if [ -d "$repro" ] && [ -n "$(ls -A "$repro" 2>/dev/null)" ]; then
        for f in "$repro"/*; do
            if ! "$bin" -runs=1 "$f" >> "$log" 2>&1; then
                {
                    echo "FAIL $t: reproducer ${f#$ROOT/} still fails"
                    grep -E '==FUZZ==|runtime error|ERROR: AddressSanitizer|SUMMARY' "$log" \
                        | head -n 4 | sed 's/^/     /'
                } > "$res"
                return 1
            fi
        done
    fi

    # 2. fuzz for $secs seconds
    mkdir -p "$OUT/corpus/$t"
    args=(-max_total_time="$secs" -print_final_stats=1 -timeout=10
          -rss_limit_mb=2048 -artifact_prefix="$OUT/artifacts/$t-")
    [ -f "$dict" ] && args+=(-dict="$dict")
    # shellcheck disable=SC2207
    args+=($(opts "$t"))

    "$bin" "${args[@]}" "$OUT/corpus/$t" "$ROOT/fuzz/corpus/$t" >> "$log" 2>&1
    rc=$?

    local execs per cov corp secs_done
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    per=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    secs_done=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1)
    corp=$(ls "$OUT/corpus/$t" | wc -l)

    if [ $rc -eq 0 ]; then
        printf 'ok   %-10s %12s execs in %ss (%s/s)  %s  corpus %s\n' \
            "$t" "${execs:-?}" "${secs_done:-$secs}" "${per:-?}" "${cov:-}" "$corp" > "$res"
    else
        {
            printf 'FAIL %-10s after %s execs (exit %d)\n' "$t" "${execs:-?}" "$rc"
            grep -E '==FUZZ==|runtime error|ERROR: (AddressSanitizer|libFuzzer)|SUMMARY|Test unit written' "$log" \
                | head -n 8 | sed 's/^/     /'
        } > "$res"
    fi
    return $rc
}

echo "fuzz: ${targets[*]}, ${secs}s each, $jobs at a time (logs: build/fuzz/logs/)"

pids=()
names=()
failed=0
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n || true
    done
    rm -f "$OUT/logs/$t.result"
    run_one "$t" &
    pids+=($!)
    names+=("$t")
done
wait

for t in "${names[@]}"; do
    if [ -f "$OUT/logs/$t.result" ]; then
        sed 's/^/fuzz: /' "$OUT/logs/$t.result"
        grep -q '^ok ' "$OUT/logs/$t.result" || failed=1
    else
        echo "fuzz: FAIL $t: no result (see build/fuzz/logs/$t.log)"
        failed=1
    fi
done | tee "$OUT/last-run.txt"

if grep -q 'FAIL' "$OUT/last-run.txt"; then
    echo "fuzz: FAILED (inputs in build/fuzz/artifacts/; keep one as fuzz/repro/<target>/<name>)" >&2
    exit 1
fi
echo "fuzz: all targets passed"
