#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# `make bench-scale`: the store's cost against the number of live keys
# (docs/benchmarks.md, "The store at scale").  Starts a MariaDB of its own
# (build/bench-scale/mysql, a buffer pool far smaller than the table),
# runs bench/scale.py, then stops it and removes its data directory.
#
#   bench/scale.sh            the run: build/bench-scale/results/
#                             size-N.json, scale.md, scale.png
#   bench/scale.sh report     scale.md and scale.png again
#   bench/scale.sh schemas    the previous schema and the candidates of
#                             bench/scale-schemas/ by stored procedures,
#                             at SCALE_SCHEMA_SIZES ["0 1000000"] live
#                             keys (bench/scale_schemas.py): schemas.md;
#                             SCALE_SCHEMAS ["previous narrow timed timed32"],
#                             SCALE_PAIRS [20000], SCALE_MIGRATION [1]: time
#                             the migrations on the previous table
#
# Environment (defaults in brackets): SCALE_SIZES ["0 1000000 5000000
# 20000000"] live keys, SCALE_BUFFER_POOL [3G: about 110 bytes a live
# key at 20 M, docs/operations.md], SCALE_MYSQL_PORT [3317],
# SCALE_PORT_BASE [18280] (nginx there, the upstream on BASE+10),
# SCALE_DURATION [10] seconds per measurement, SCALE_WARMUP [1],
# SCALE_PURGE_ROUNDS [3] purge off/on pairs,
# SCALE_WARM_TRAFFIC [20] seconds of first requests before measuring,
# SCALE_COLD_KEYS [0: max(20000, one per 32 live keys)] real keys among
# the live ones, replayed, SCALE_BACKLOG [600] seconds of expirations
# already due when the purge starts, SCALE_KEEP_DATA [0] (1: leave
# MariaDB and its data running), SCALE_SCHEMA [today]: today's
# mysql/schema.sql, or previous (bench/scale-schemas/previous.sql, the
# table before rows were kept in expiry order), SCALE_MIGRATE [0] (1:
# fill the previous table at each size, time mysql/upgrade-expiry-
# order.sql with first requests going on, then measure the upgraded
# table), SCALE_TABLE_SQL [none]: SQL run on the empty table first (e.g.
# SCALE_SCHEMA=previous SCALE_TABLE_SQL=bench/scale-schemas/to-timed.sql);
# BENCH_CONNECTIONS, BENCH_THREADS and BENCH_WORKERS as for make bench.
# Needs bench/setup.sh (wrk, gnuplot) and `make build`.

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=$ROOT/build/bench-scale/mysql

if [ "${1:-}" = report ]; then
    exec python3 "$ROOT/bench/scale.py" report
fi

POOL=${SCALE_BUFFER_POOL:-3G}
PORT=${SCALE_MYSQL_PORT:-3317}

mysql() { "$ROOT/scripts/services.sh" mysql "$1" "$DIR" --name scale-mysql \
              --port "$PORT" "${@:2}"; }

cleanup() {
    if [ "${SCALE_KEEP_DATA:-0}" != 1 ]; then
        mysql stop || true
        rm -rf "$DIR"
    fi
}

# the make test tuning (scripts/services.sh) but for the buffer pool
mysql start --fresh -- --innodb-buffer-pool-size="$POOL" \
    --innodb-log-file-size=1G --innodb-io-capacity=2000 \
    --innodb-io-capacity-max=4000 --innodb-max-dirty-pages-pct-lwm=10 \
    --max-connections=500 --thread-handling=pool-of-threads \
    --innodb-spin-wait-delay=0
trap cleanup EXIT
if [ "${1:-}" = schemas ]; then
    python3 "$ROOT/bench/scale_schemas.py"
else
    SCALE_MYSQL_PORT=$PORT python3 "$ROOT/bench/scale.py"
fi
