#!/usr/bin/env bash
# First-request throughput with one vs two MySQL shards, and the table's
# size per stored key (docs/scale-out.md).  Run on demand:
#
#   make bench-shards  [SHARD_ROUNDS=3 SHARD_DURATION=10 SHARD_CONNECTIONS=64]
#
# One nginx (2 workers) with the module in front of a `return 201`
# upstream in the same nginx, so the figures show the store's cost, not a
# backend's.  The shards are the two private MariaDB servers of
# scripts/services.sh (3307, 3308), each with its own table
# bench_shard_keys so that the test suite's table is never touched.
# Rounds alternate 1 and 2 shards; the median round is reported.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

ROUNDS=${SHARD_ROUNDS:-3}
DURATION=${SHARD_DURATION:-10}
CONNS=${SHARD_CONNECTIONS:-64}
PORT=${SHARD_PORT:-18180}
UPORT=$((PORT + 1))
NGINX=${NGINX_BIN:-/usr/sbin/nginx}
SO=$ROOT/build/ngx_http_idempotency_module.so
P=$ROOT/build/bench-shards
SVC=$ROOT/build/services
M1=${IDEM_MYSQL_PORT:-3307}
M2=${IDEM_MYSQL2_PORT:-3308}
TABLE=bench_shard_keys

mkdir -p "$P/logs" "$P/conf" "$P/tmp" "$P/results"

root_sql() {    # socket, statements
    mariadb --no-defaults --batch --skip-column-names --protocol=socket \
        --socket="$1" -uroot idempotency -e "$2"
}

for s in "$SVC/mysql.sock" "$SVC/mysql2.sock"; do
    sed "s/idempotency_keys/$TABLE/" mysql/schema.sql \
        | mariadb --no-defaults --protocol=socket --socket="$s" -uroot \
                  idempotency
done

write_conf() {  # mysql= list
    cat > "$P/conf/nginx.conf" <<CONF
load_module $SO;
$( [ "$(id -u)" = 0 ] && echo "user root;" )
worker_processes 2;
pid $P/logs/nginx.pid;
error_log $P/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $P/tmp/body;
    proxy_temp_path $P/tmp/proxy;
    idempotency_store bench $1 user=idem password=idem-secret
                      database=idempotency table=$TABLE pool=32
                      wait_queue=4096 purge=off;
    upstream app { server 127.0.0.1:$UPORT; keepalive 64; }
    server {
        listen 127.0.0.1:$UPORT;
        location / { return 201 '{"id":"ord_1","status":"created"}'; }
    }
    server {
        listen 127.0.0.1:$PORT backlog=4096;
        location / {
            idempotency bench;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://app;
        }
    }
}
CONF
}

stop_nginx() {
    if [ -s "$P/logs/nginx.pid" ]; then
        kill -QUIT "$(cat "$P/logs/nginx.pid")" 2>/dev/null || true
        for _ in $(seq 50); do
            [ -e "$P/logs/nginx.pid" ] || break
            sleep 0.1
        done
    fi
}
trap stop_nginx EXIT

mysql_cpu() {   # user + system clock ticks of both MariaDB servers
    local t=0 f pid
    for f in "$SVC/mysql.pid" "$SVC/shard2/mysql.pid"; do
        pid=$(cat "$f")
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$t"
}

run_one() {     # label, mysql= list, round
    local out=$P/results/$1-$3.txt
    root_sql "$SVC/mysql.sock" "TRUNCATE $TABLE"
    root_sql "$SVC/mysql2.sock" "TRUNCATE $TABLE"
    stop_nginx
    write_conf "$2"
    "$NGINX" -p "$P/" -c "$P/conf/nginx.conf" -e "$P/logs/error.log"
    sleep 0.5
    # warm the pools, then measure
    wrk -t2 -c"$CONNS" -d2s -s bench/lua/unique.lua \
        "http://127.0.0.1:$PORT/orders" >/dev/null
    local c0 c1
    c0=$(mysql_cpu)
    wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s bench/lua/unique.lua \
        "http://127.0.0.1:$PORT/orders" > "$out"
    c1=$(mysql_cpu)
    grep '^BENCH' "$out" \
        | sed "s/^BENCH/$1 round=$3/; s/\$/ mysql_cpu_ticks=$((c1 - c0))/"
}

one="mysql=127.0.0.1:$M1"
two="mysql=127.0.0.1:$M1 mysql=127.0.0.1:$M2"

: > "$P/results/summary.txt"
for r in $(seq "$ROUNDS"); do
    run_one 1shard "$one" "$r" | tee -a "$P/results/summary.txt"
    run_one 2shards "$two" "$r" | tee -a "$P/results/summary.txt"
done

# the size of the table per row, from the last 2-shard round
root_sql "$SVC/mysql.sock" "ANALYZE TABLE $TABLE" >/dev/null
size=$(root_sql "$SVC/mysql.sock" "SELECT COUNT(*),
    (SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES
     WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '$TABLE'),
    AVG(LENGTH(response)) FROM $TABLE")

python3 - "$P/results/summary.txt" "$DURATION" "$CONNS" "$size" <<'PY'
import os, re, statistics, sys

TICKS = os.sysconf('SC_CLK_TCK')

rows = {}
for line in open(sys.argv[1]):
    label = line.split()[0]
    f = dict(kv.split('=') for kv in line.split()[1:])
    rps = int(f['requests']) / (int(f['duration_us']) / 1e6)
    errs = sum(int(f[k]) for k in f if k.startswith('err_'))
    cpu_us = int(f['mysql_cpu_ticks']) * 1e6 / TICKS / int(f['requests'])
    rows.setdefault(label, []).append((rps, int(f['p50_us']),
                                       int(f['p99_us']), errs, cpu_us))

print()
print('| store | first requests/s | p50 | p99 | MariaDB CPU per request '
      '| errors | rounds |')
print('|---|---:|---:|---:|---:|---:|---:|')
med = {}
for label in ('1shard', '2shards'):
    r = rows[label]
    rps = statistics.median(x[0] for x in r)
    med[label] = rps
    print('| %s | %.0f | %.2f ms | %.2f ms | %.0f µs | %d | %d |' % (
        '1 shard' if label == '1shard' else '2 shards', rps,
        statistics.median(x[1] for x in r) / 1000,
        statistics.median(x[2] for x in r) / 1000,
        statistics.median(x[4] for x in r),
        sum(x[3] for x in r), len(r)))
print()
print('2 shards / 1 shard: %.2fx (wrk -t2 -c%s, %ss per round)' % (
    med['2shards'] / med['1shard'], sys.argv[3], sys.argv[2]))
n, size, avg = sys.argv[4].split('\t')
print('table on shard 1 after the last round: %s rows, %s bytes of data '
      'and indexes (%.0f bytes per row), stored records of %.0f bytes' % (
          n, size, int(size) / max(int(n), 1), float(avg)))
PY
