#!/bin/sh
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/sqlcost.sh: mariadbd CPU per request of the module's statements
# (build/sqlcost, bench/sqlcost.c) on the table of mysql/schema.sql and on
# variants of it, in alternating rounds, so that a slow phase of a shared
# machine hits every variant alike.  A variant is a file of ALTERs run
# after mysql/schema.sql (bench/sqlcost-variants/, or
# bench/scale-schemas/previous.sql); "schema" is mysql/schema.sql alone.
# A variant ending in ":lease" runs a completion that keeps an answer
# stored after retention in lease_until (SQLCOST_KEEP=lease, sqlcost.c)
# instead of the module's, which moves expires_at.
#
#   make bench-sqlcost-variants            (the services' MariaDB)
#
# Environment: SQLCOST_VARIANTS, SQLCOST_ROUNDS [4], SQLCOST_THREADS [8],
# SQLCOST_REQUESTS [2500], SQLCOST_BATCH [8], MYSQL_PORT [3307],
# MYSQL_SOCK, MYSQL_PIDFILE.  Prints each round, then per variant and
# mode the median and the range of the rounds, and the context switches
# of mariadbd per request (perf stat, when perf is there).

set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VARIANTS=${SQLCOST_VARIANTS:-"schema bench/scale-schemas/previous.sql
    bench/sqlcost-variants/previous-listing.sql
    bench/sqlcost-variants/no-listing.sql"}
ROUNDS=${SQLCOST_ROUNDS:-4}
THREADS=${SQLCOST_THREADS:-8}
REQUESTS=${SQLCOST_REQUESTS:-2500}
BATCH=${SQLCOST_BATCH:-8}
PORT=${MYSQL_PORT:-3307}
SOCK=${MYSQL_SOCK:-$ROOT/build/services/mysql.sock}
PIDFILE=${MYSQL_PIDFILE:-$ROOT/build/services/mysql.pid}
OUT=$ROOT/build/sqlcost-variants.txt

. "$ROOT/bench/keytable.sh"

# one measurement: "variant mode us-per-request context-switches-per-request"
measure() {
    v=$1; m=$2; n=$3
    file=${v%%:*}
    keep=
    name=$(basename "$file" .sql)

    case $v in
    *:*) keep=${v#*:}; name=$name:$keep ;;
    esac

    table "$file"
    pid=$(cat "$PIDFILE")
    cs=-

    if command -v perf >/dev/null 2>&1; then
        perf stat -e context-switches -p "$pid" -o "$OUT.perf" \
            >/dev/null 2>&1 &
        perf_pid=$!
        sleep 0.3
    fi

    us=$(SQLCOST_KEEP=$keep "$ROOT/build/sqlcost" "$m" "$THREADS" \
         "$REQUESTS" "$PORT" "$PIDFILE" "$n" | awk '{ print $4 }')

    if [ -n "${perf_pid:-}" ]; then
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
        cs=$(awk -v r=$((THREADS * REQUESTS)) \
             '/context-switches/ { gsub(",", "", $1); printf "%.2f", $1 / r }' \
             "$OUT.perf")
        perf_pid=
    fi

    echo "$name $m $us $cs"
}

[ -x "$ROOT/build/sqlcost" ] || {
    echo "sqlcost.sh: build/sqlcost is missing (make bench-sqlcost-variants)" >&2
    exit 1
}

: > "$OUT"
r=1

while [ $r -le "$ROUNDS" ]; do
    for v in $VARIANTS; do
        measure "$v" first 1 | tee -a "$OUT"
        measure "$v" first-batch "$BATCH" | tee -a "$OUT"
    done

    r=$((r + 1))
done

table schema

echo
echo "variant / mode: mariadbd us per request, median (lowest-highest) of" \
     "$ROUNDS rounds; context switches per request, median"
sort -k1,1 -k2,2 -s "$OUT" | awk '
    function median(a, n,    i, j, t) {
        for (i = 2; i <= n; i++) {
            for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
                t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
            }
        }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function flush() {
        if (key == "") return
        printf "%-24s %6.1f (%.1f-%.1f)  %s\n", key, median(us, n),
               us[1], us[n], cs_n ? sprintf("%.2f", median(cs, cs_n)) : "-"
    }
    {
        k = $1 " / " $2
        if (k != key) { flush(); key = k; n = 0; cs_n = 0 }
        us[++n] = $3 + 0
        if ($4 != "-") cs[++cs_n] = $4 + 0
    }
    END { flush() }'
