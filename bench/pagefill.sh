#!/bin/sh
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/pagefill.sh: how full the key table's pages are after a run of
# first requests, as claims arrive in a running store (not the key order
# of make bench-scale's fill).  Each round makes the table anew from
# mysql/schema.sql, runs build/sqlcost first-batch (the module's claim
# and completion statements, THREADS clients, BATCH to a statement, a
# 300-byte record), then reads the table's pages from the buffer pool
# (information_schema.INNODB_BUFFER_PAGE of the table's tablespace, not
# the dropped one's pages still there: the whole table is there) and
# prints per index its pages, records, fill (data over page bytes) and
# bytes a key.  Retention ends on a whole second, as the module's does;
# "ms" runs the claim with retention to the millisecond
# (SQLCOST_RETAIN=ms, sqlcost.c) for comparison.
#
#   make bench-pagefill                    (the services' MariaDB)
#
# Environment: PAGEFILL_RETAIN ["second ms"], PAGEFILL_ROUNDS [2],
# PAGEFILL_THREADS [8], PAGEFILL_REQUESTS [12500 a client], PAGEFILL_BATCH
# [8], MYSQL_PORT [3307], MYSQL_SOCK, MYSQL_PIDFILE.  The table is left
# empty, made from mysql/schema.sql, at the end.

set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RETAIN=${PAGEFILL_RETAIN:-"second ms"}
ROUNDS=${PAGEFILL_ROUNDS:-2}
THREADS=${PAGEFILL_THREADS:-8}
REQUESTS=${PAGEFILL_REQUESTS:-12500}
BATCH=${PAGEFILL_BATCH:-8}
PORT=${MYSQL_PORT:-3307}
SOCK=${MYSQL_SOCK:-$ROOT/build/services/mysql.sock}
PIDFILE=${MYSQL_PIDFILE:-$ROOT/build/services/mysql.pid}

. "$ROOT/bench/keytable.sh"

trap table EXIT

round=1
while [ "$round" -le "$ROUNDS" ]; do
    for r in $RETAIN; do
        case $r in
        second) env= ;;
        ms)     env=ms ;;
        *)      echo "pagefill: retention '$r': second or ms" >&2; exit 1 ;;
        esac

        table
        SQLCOST_RETAIN=$env "$ROOT/build/sqlcost" first-batch "$THREADS" \
            "$REQUESTS" "$PORT" "$PIDFILE" "$BATCH" >/dev/null

        echo "== round $round, retention to the $r," \
             "$((THREADS * REQUESTS)) first requests"
        mysql_root -t -e "
            SELECT INDEX_NAME AS idx, COUNT(*) AS pages,
                   SUM(NUMBER_RECORDS) AS records,
                   ROUND(SUM(DATA_SIZE) / (COUNT(*) * 16384), 2) AS fill,
                   ROUND(COUNT(*) * 16384 / SUM(NUMBER_RECORDS))
                       AS bytes_a_key
              FROM information_schema.INNODB_BUFFER_PAGE
             WHERE SPACE = (SELECT SPACE
                                FROM information_schema.INNODB_SYS_TABLES
                               WHERE NAME = 'idempotency/idempotency_keys')
               AND PAGE_TYPE = 'INDEX'
             GROUP BY INDEX_NAME ORDER BY INDEX_NAME"
    done
    round=$((round + 1))
done
