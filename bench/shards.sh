#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# First-request throughput with one vs two MySQL shards, and the table's
# size per stored key (docs/scale-out.md).  Run on demand:
#
#   make bench-shards  [SHARD_ROUNDS=3 SHARD_DURATION=10 SHARD_CONNECTIONS=64
#                       SHARD_CPU=0.3 SHARD_CPU_PERIOD=100000]
#
# One nginx (2 workers) with the module in front of a `return 201`
# upstream in the same nginx, so the figures show the store's cost, not a
# backend's.  The shards are the two private MariaDB servers of
# scripts/services.sh (3307, 3308), each with its own table
# bench_shard_keys so that the test suite's table is never touched.
#
# On one machine the two MariaDB servers share its CPUs with nginx and
# wrk, so a second shard adds no capacity there.  In production each
# shard is its own host with its own CPUs.  To show that here, the
# "limited" rows put each mariadbd in a cgroup of its own with a CPU
# quota of SHARD_CPU CPUs (and a high weight, so that it gets its quota
# whenever it wants it, as a host's own CPUs would give it): the store,
# not nginx or wrk, is then the limit, and a second shard adds its own
# budget.  The "unlimited" rows are the configuration as it is, with no
# cgroup.  SHARD_CPU=0 runs the unlimited rows only.  Root and the cgroup
# v1 cpu controller or cgroup v2 with cpu are needed for the limited
# rows; without them they are skipped, with one line saying why.
#
# Each round runs the four configurations (1 and 2 shards, limited and
# unlimited) in turn; the median round is reported.

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
# 0.3: measured so that one shard is throttled in nearly every period
# while the machine has CPU to spare, and two shards still are, with
# nginx and wrk short of nothing (at 0.5 two shards kept the machine's
# two CPUs busy, and nginx and wrk shared the limit with the quota)
SHARD_CPU=${SHARD_CPU:-0.3}
# the kernel's default period (100 ms); a 10 ms one cost MariaDB more CPU
# per request and gave longer tails, so shorter is no closer to a host
PERIOD=${SHARD_CPU_PERIOD:-100000}
CG_NAME=idem-bench-shard       # + 1, 2: one cgroup per mariadbd

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
cleanup() { cg_cleanup; stop_nginx; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the CPU quota: one cgroup per mariadbd -------------------------------

MY_PIDS=("$(cat "$SVC/mysql.pid")" "$(cat "$SVC/shard2/mysql.pid")")
CG_VER='' CG_BASE='' CG_WHY=''
MY_HOME=()      # each mariadbd's own cgroup (path), to move it back to

cg_find() {     # sets CG_VER and CG_BASE, or CG_WHY
    local dir type opts _
    [ "$(id -u)" = 0 ] || { CG_WHY="not root"; return 1; }
    while read -r _ dir type opts _; do
        case $type,",$opts," in
        cgroup,*,cpu,*) CG_VER=1 CG_BASE=$dir; return 0 ;;
        esac
    done < /proc/mounts
    while read -r _ dir type opts _; do
        if [ "$type" = cgroup2 ] \
           && grep -qw cpu "$dir/cgroup.controllers" 2>/dev/null; then
            # children get the cpu controller only if the root hands it on
            echo +cpu > "$dir/cgroup.subtree_control" 2>/dev/null || {
                CG_WHY="cgroup v2 at $dir: cannot enable +cpu in"
                CG_WHY="$CG_WHY cgroup.subtree_control"; return 1; }
            CG_VER=2 CG_BASE=$dir
            return 0
        fi
    done < /proc/mounts
    CG_WHY="no cgroup v1 cpu controller and no cgroup v2 with cpu"
    return 1
}

cg_of() {       # pid -> its cgroup (path below CG_BASE) for our controller
    if [ "$CG_VER" = 1 ]; then
        awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' "/proc/$1/cgroup"
    else
        awk -F: '$1 == "0" { print $3 }' "/proc/$1/cgroup"
    fi
}

cg_quota() {    # cgroup dir, "max" or a quota in µs per PERIOD
    if [ "$CG_VER" = 1 ]; then
        echo "$PERIOD" > "$1/cpu.cfs_period_us"
        if [ "$2" = max ]; then echo -1; else echo "$2"; fi \
            > "$1/cpu.cfs_quota_us"
    else
        echo "$2 $PERIOD" > "$1/cpu.max"
    fi
}

cg_stale() {    # a run killed with SIGKILL leaves its cgroups: empty them
    local i g pid
    for i in 1 2; do
        g=$CG_BASE/$CG_NAME$i
        [ -d "$g" ] || continue
        echo "shards: $g left by an earlier run: removed" >&2
        while read -r pid; do
            echo "$pid" > "$CG_BASE/cgroup.procs" || true
        done < "$g/cgroup.procs"
        rmdir "$g"
    done
}

cg_setup() {    # the two cgroups
    local i g cur
    for i in 1 2; do
        g=$CG_BASE/$CG_NAME$i
        mkdir "$g" || { CG_WHY="cannot create $g"; return 1; }
        cg_quota "$g" max
        # the weight: a host's own CPUs do not wait for nginx and wrk
        if [ "$CG_VER" = 1 ]; then echo 262144 > "$g/cpu.shares"
        else echo 10000 > "$g/cpu.weight"; fi
        cur=$(cg_of "${MY_PIDS[i - 1]}")
        MY_HOME[i - 1]=$cur
    done
}

throttle() {    # on|off: both mariadbd in their quota cgroups, or back home
    local i g pid q t c bad
    q=$(awk -v c="$SHARD_CPU" -v p="$PERIOD" 'BEGIN { printf "%d", c * p }')
    for i in 1 2; do
        g=$CG_BASE/$CG_NAME$i
        pid=${MY_PIDS[i - 1]}
        if [ "$1" = on ]; then
            cg_quota "$g" "$q"
            # cgroup.procs moves the whole thread group; check every thread
            # (one may end meanwhile: the thread pool retires idle ones)
            echo "$pid" > "$g/cgroup.procs"
            bad=
            for t in /proc/"$pid"/task/*; do
                c=$(cg_of "${t#/proc/}" 2>/dev/null) || continue
                [ "$c" = "/$CG_NAME$i" ] || bad+=" ${t##*/}"
            done
            if [ -n "$bad" ]; then
                echo "shards: threads of mariadbd $pid outside $g:$bad" >&2
                return 1
            fi
        else
            echo "$pid" > "$CG_BASE${MY_HOME[i - 1]%/}/cgroup.procs"
            cg_quota "$g" max
        fi
    done
}

cg_cleanup() {  # never leave a mariadbd throttled, nor our cgroups behind
    local i g pid home
    [ -n "$CG_BASE" ] || return 0
    for i in 1 2; do
        g=$CG_BASE/$CG_NAME$i
        [ -d "$g" ] || continue
        home=${MY_HOME[i - 1]:-/}
        while read -r pid; do
            echo "$pid" > "$CG_BASE${home%/}/cgroup.procs" 2>/dev/null \
                || echo "$pid" > "$CG_BASE/cgroup.procs" || true
        done < "$g/cgroup.procs"
        rmdir "$g" || echo "shards: could not remove $g" >&2
    done
}

cg_stat() {     # throttled periods, periods, throttled ns of both cgroups
    local i f n=0 p=0 ns=0 k v
    for i in 1 2; do
        f=$CG_BASE/$CG_NAME$i/cpu.stat
        while read -r k v; do
            case $k in
            nr_periods) p=$((p + v)) ;;
            nr_throttled) n=$((n + v)) ;;
            throttled_time) ns=$((ns + v)) ;;            # v1: ns
            throttled_usec) ns=$((ns + v * 1000)) ;;     # v2: µs
            esac
        done < "$f"
    done
    echo "$n $p $ns"
}

if ! [[ $SHARD_CPU =~ ^[0-9]*\.?[0-9]+$ ]]; then
    echo "shards: SHARD_CPU=$SHARD_CPU is not a number of CPUs" >&2
    exit 2
fi
LIMITED=0
# stale cgroups are removed even when this run limits nothing
cg_find && cg_stale
if awk -v c="$SHARD_CPU" 'BEGIN { exit !(c + 0 == 0) }'; then
    CG_WHY="SHARD_CPU=$SHARD_CPU"
elif [ -n "$CG_BASE" ] && cg_setup; then
    LIMITED=1
fi
if [ "$LIMITED" = 0 ]; then
    echo "shards: limited rows skipped ($CG_WHY): unlimited rows only"
else
    echo "shards: limited rows: each mariadbd at $SHARD_CPU CPU" \
         "(cgroup v$CG_VER, $CG_BASE/$CG_NAME{1,2})"
fi

mysql_cpu() {   # user + system clock ticks of both MariaDB servers
    local t=0 pid
    for pid in "${MY_PIDS[@]}"; do
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$t"
}

machine_cpu() { # busy and all clock ticks of the machine (all CPUs)
    awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i
                       print t - $5 - $6, t }' /proc/stat
}

run_one() {     # label, mysql= list, round[, on: the quota]
    local out=$P/results/$1-$3.txt
    root_sql "$SVC/mysql.sock" "TRUNCATE $TABLE"
    root_sql "$SVC/mysql2.sock" "TRUNCATE $TABLE"
    stop_nginx
    write_conf "$2"
    "$NGINX" -p "$P/" -c "$P/conf/nginx.conf" -e "$P/logs/error.log"
    sleep 0.5
    # the quota from the warm-up on, so that the measured part is steady
    [ "${4:-}" != on ] || throttle on
    # warm the pools, then measure
    wrk -t2 -c"$CONNS" -d2s -s bench/lua/unique.lua \
        "http://127.0.0.1:$PORT/orders" >/dev/null
    local c0 c1 m0 m1 t0=(0 0 0) t1=(0 0 0) extra
    [ "${4:-}" != on ] || read -r -a t0 <<< "$(cg_stat)"
    c0=$(mysql_cpu)
    read -r -a m0 <<< "$(machine_cpu)"
    wrk -t2 -c"$CONNS" -d"${DURATION}s" --latency -s bench/lua/unique.lua \
        "http://127.0.0.1:$PORT/orders" > "$out"
    c1=$(mysql_cpu)
    read -r -a m1 <<< "$(machine_cpu)"
    if [ "${4:-}" = on ]; then
        read -r -a t1 <<< "$(cg_stat)"
        throttle off
    fi
    extra="mysql_cpu_ticks=$((c1 - c0))"
    extra+=" busy_ticks=$((m1[0] - m0[0])) all_ticks=$((m1[1] - m0[1]))"
    extra+=" nr_throttled=$((t1[0] - t0[0])) nr_periods=$((t1[1] - t0[1]))"
    extra+=" throttled_ns=$((t1[2] - t0[2]))"
    grep '^BENCH' "$out" | sed "s/^BENCH/$1 round=$3/; s/\$/ $extra/"
}

one="mysql=127.0.0.1:$M1"
two="mysql=127.0.0.1:$M1 mysql=127.0.0.1:$M2"

: > "$P/results/summary.txt"
for r in $(seq "$ROUNDS"); do
    # limited first, so that the last round is the unlimited 2 shards.
    # A throttled mariadbd runs its quota and then stalls for the rest of
    # the period: the limited rows' p99 shows that, not a slow host.
    if [ "$LIMITED" = 1 ]; then
        run_one 1shard-cpu "$one" "$r" on | tee -a "$P/results/summary.txt"
        run_one 2shards-cpu "$two" "$r" on | tee -a "$P/results/summary.txt"
    fi
    run_one 1shard "$one" "$r" | tee -a "$P/results/summary.txt"
    run_one 2shards "$two" "$r" | tee -a "$P/results/summary.txt"
done

# the size of the table per row, from the last (unlimited 2-shard) round
root_sql "$SVC/mysql.sock" "ANALYZE TABLE $TABLE" >/dev/null
size=$(root_sql "$SVC/mysql.sock" "SELECT COUNT(*),
    (SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES
     WHERE TABLE_SCHEMA = 'idempotency' AND TABLE_NAME = '$TABLE'),
    AVG(LENGTH(response)) FROM $TABLE")

python3 - "$P/results/summary.txt" "$DURATION" "$CONNS" "$size" \
        "$SHARD_CPU" "$LIMITED" <<'PY'
import os, statistics, sys

TICKS = os.sysconf('SC_CLK_TCK')
NCPU = os.cpu_count()
summary, duration, conns, size, shard_cpu, limited = sys.argv[1:7]

rows = {}
for line in open(summary):
    label = line.split()[0]
    f = dict(kv.split('=') for kv in line.split()[1:])
    rps = int(f['requests']) / (int(f['duration_us']) / 1e6)
    errs = sum(int(f[k]) for k in f if k.startswith('err_'))
    cpu_us = int(f['mysql_cpu_ticks']) * 1e6 / TICKS / int(f['requests'])
    busy = int(f['busy_ticks']) / max(int(f['all_ticks']), 1) * NCPU
    rows.setdefault(label, []).append(dict(
        rps=rps, p50=int(f['p50_us']), p99=int(f['p99_us']), errs=errs,
        cpu_us=cpu_us, busy=busy, thr=int(f['nr_throttled']),
        periods=int(f['nr_periods']), thr_s=int(f['throttled_ns']) / 1e9))

def med(r, k):
    return statistics.median(x[k] for x in r)

names = [('1shard-cpu', '1 shard', 'limited: %s CPU' % shard_cpu),
         ('2shards-cpu', '2 shards', 'limited: %s CPU each' % shard_cpu),
         ('1shard', '1 shard', 'unlimited'),
         ('2shards', '2 shards', 'unlimited')]
print()
# throttled periods and time: both cgroups together, over the measured run
print('| store | MariaDB CPU | first requests/s | p50 | p99 '
      '| MariaDB CPU per request | machine CPU busy '
      '| periods throttled | throttled time | errors | rounds |')
print('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
rps = {}
for label, store, cpu in names:
    if label not in rows:
        continue
    r = rows[label]
    rps[label] = med(r, 'rps')
    if label.endswith('-cpu'):
        thr = '%.0f / %.0f' % (med(r, 'thr'), med(r, 'periods'))
        thr_s = '%.1f s' % med(r, 'thr_s')
    else:
        thr = thr_s = '-'
    print('| %s | %s | %.0f | %.2f ms | %.2f ms | %.0f µs | %.2f of %d '
          '| %s | %s | %d | %d |' % (
              store, cpu, rps[label], med(r, 'p50') / 1000,
              med(r, 'p99') / 1000, med(r, 'cpu_us'), med(r, 'busy'), NCPU,
              thr, thr_s, sum(x['errs'] for x in r), len(r)))
print()
for suffix, what in (('-cpu', 'limited to %s CPU per mariadbd' % shard_cpu),
                     ('', 'unlimited')):
    if '1shard' + suffix in rps:
        print('2 shards / 1 shard, %s: %.2fx' % (
            what, rps['2shards' + suffix] / rps['1shard' + suffix]))
print('(wrk -t2 -c%s, %ss per round, median round)' % (conns, duration))
if limited != '1':
    print('limited rows skipped: see the line at the start')
n, size, avg = size.split('\t')
print('table on shard 1 after the last round: %s rows, %s bytes of data '
      'and indexes (%.0f bytes per row), stored records of %.0f bytes' % (
          n, size, int(size) / max(int(n), 1), float(avg)))
PY
