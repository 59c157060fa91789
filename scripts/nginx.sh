#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Start/stop the demo nginx (make run / make stop).
#
#   scripts/nginx.sh start PREFIX     nginx -p PREFIX/ -c nginx.conf
#   scripts/nginx.sh stop  PREFIX
#
# NGINX_BIN [/usr/sbin/nginx] selects the binary.

set -euo pipefail

NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}

die() { echo "nginx: $*" >&2; exit 1; }

alive() {
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

master_pid() {
    local pid
    [ -s "$1/nginx.pid" ] || return 1
    pid=$(tr -dc '0-9' < "$1/nginx.pid")
    [ -n "$pid" ] && alive "$pid" || return 1
    case $(cat "/proc/$pid/comm" 2>/dev/null) in nginx*) ;; *) return 1 ;; esac
    echo "$pid"
}

stop() {
    local prefix=$1 pid i
    if pid=$(master_pid "$prefix"); then
        kill -QUIT "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            sleep 1
            alive "$pid" && kill -9 "$pid" 2>/dev/null || true
        fi
        echo "nginx: stopped (pid $pid)"
    else
        echo "nginx: not running"
    fi
    rm -f "$prefix/nginx.pid"
}

start() {
    local prefix=$1 pid i g=()
    [ -x "$NGINX_BIN" ] || die "$NGINX_BIN not found (make deps)"
    [ -f "$prefix/nginx.conf" ] || die "$prefix/nginx.conf missing"
    stop "$prefix" >/dev/null
    # As root, the workers run as root too, as Test::Nginx runs the
    # tests' nginx: nobody, nginx's default, cannot enter a checkout under
    # a folder that others may not (root's home), where the prefix and
    # its temp paths are.  A configuration's own "user" is kept.
    if [ "$(id -u)" = 0 ] && ! grep -qE '^[[:space:]]*user[[:space:]]' "$prefix/nginx.conf"; then
        g=(-g 'user root;')
    fi
    if ! "$NGINX_BIN" -p "$prefix/" -c nginx.conf "${g[@]}" -t -q 9>&-; then
        die "configuration test failed ($prefix/nginx.conf)"
    fi
    : > "$prefix/error.log"     # a fresh log per start
    "$NGINX_BIN" -p "$prefix/" -c nginx.conf "${g[@]}" 9>&- 2>"$prefix/error.log.start" \
        || { cat "$prefix/error.log.start" >&2; die "failed to start"; }
    for ((i = 0; i < 50; i++)); do
        pid=$(master_pid "$prefix") && break
        sleep 0.1
    done
    pid=$(master_pid "$prefix") || {
        tail -n 20 "$prefix/error.log" >&2 2>/dev/null
        die "nginx is not running after start"
    }
    sleep 0.3
    if grep -q '\[emerg\]\|\[alert\]' "$prefix/error.log" 2>/dev/null; then
        echo "nginx: warning: emerg/alert messages in $prefix/error.log:" >&2
        grep '\[emerg\]\|\[alert\]' "$prefix/error.log" | tail -n 5 >&2
    fi
    echo "nginx: started (pid $pid, $prefix/nginx.conf)"
}

case ${1:-} in
    start) start "$(cd "${2:?prefix}" && pwd)" ;;
    stop)  [ -d "${2:?prefix}" ] || { echo "nginx: not running"; exit 0; }
           stop "$(cd "$2" && pwd)" ;;
    *) echo "usage: $0 start|stop PREFIX" >&2; exit 2 ;;
esac
