#!/usr/bin/env bash
# Start/stop the demo/test backend (backend/app.py) in the background.
#
#   scripts/backend.sh start   PORT PIDFILE LOGFILE   reuse a running one
#   scripts/backend.sh restart PORT PIDFILE LOGFILE   always a fresh one
#   scripts/backend.sh stop    PIDFILE [-q]
#   scripts/backend.sh status  PIDFILE

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
APP=$ROOT/backend/app.py
PYTHON=${PYTHON:-python3}

die() { echo "backend: $*" >&2; exit 1; }

alive() {
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

pid_of() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(tr -dc '0-9' < "$1")
    [ -n "$pid" ] && alive "$pid" || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'app\.py' || return 1
    echo "$pid"
}

answers() {
    curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$1/__count" 2>/dev/null
}

stop() {
    local pidfile=$1 quiet=${2:-} pid i
    if pid=$(pid_of "$pidfile"); then
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        alive "$pid" && kill -9 "$pid" 2>/dev/null || true
        [ -n "$quiet" ] || echo "backend: stopped (pid $pid)"
    else
        [ -n "$quiet" ] || echo "backend: not running"
    fi
    rm -f "$pidfile"
}

start() {
    local port=$1 pidfile=$2 logfile=$3 pid i
    [ -n "$port" ] && [ -n "$pidfile" ] && [ -n "$logfile" ] \
        || die "usage: $0 start PORT PIDFILE LOGFILE"
    if pid=$(pid_of "$pidfile") && answers "$port"; then
        echo "backend: running (pid $pid, 127.0.0.1:$port)"
        return 0
    fi
    stop "$pidfile" -q
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (scripts/deps.sh)"
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"

    setsid "$PYTHON" "$APP" --host 127.0.0.1 --port "$port" \
        --pidfile "$pidfile" --log "$logfile" \
        </dev/null >>"$logfile" 2>&1 &
    local spid=$!

    for ((i = 0; i < 100; i++)); do
        if ! alive "$spid"; then
            tail -n 15 "$logfile" >&2
            die "backend exited at startup (port $port busy?)"
        fi
        [ -s "$pidfile" ] && answers "$port" && break
        sleep 0.1
    done
    answers "$port" || { tail -n 15 "$logfile" >&2; die "no answer on port $port"; }
    echo "backend: started (pid $spid, 127.0.0.1:$port, log $logfile)"
}

case ${1:-} in
    start)   start "${2:-}" "${3:-}" "${4:-}" ;;
    restart) stop "${3:?pidfile}" -q; start "${2:-}" "${3:-}" "${4:-}" ;;
    stop)    stop "${2:?pidfile}" "${3:-}" ;;
    status)
        if pid=$(pid_of "${2:?pidfile}"); then echo "backend: running (pid $pid)"
        else echo "backend: stopped"; exit 1; fi ;;
    *) echo "usage: $0 start|restart PORT PIDFILE LOGFILE | stop|status PIDFILE" >&2
       exit 2 ;;
esac
