#!/usr/bin/env bash
# Start/stop the demo/test backend (backend/app.py) in the background.
#
#   scripts/backend.sh start   PORT PIDFILE LOGFILE [FCGI_PORT]   reuse a running one
#   scripts/backend.sh restart PORT PIDFILE LOGFILE [FCGI_PORT]   always a fresh one
#   scripts/backend.sh stop    PIDFILE [-q]
#   scripts/backend.sh status  PIDFILE
#
# FCGI_PORT (optional, may be empty): also serve FastCGI on 127.0.0.1:FCGI_PORT
# (app.py --fcgi-port); a running backend is reused only if it serves it.

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

# FastCGI on port $1 answers an FCGI_GET_VALUES with FCGI_GET_VALUES_RESULT
fcgi_answers() {
    "$PYTHON" - "$1" 2>/dev/null <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
s.sendall(b"\x01\x09\x00\x00\x00\x11\x00\x00\x0f\x00FCGI_MPXS_CONNS")
header = s.makefile("rb").read(8)
sys.exit(0 if header[:2] == b"\x01\x0a" else 1)
EOF
}

# pid $1 was started with --fcgi-port $2
has_fcgi() {
    tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -q -- "--fcgi-port $2 "
}

ready() {
    answers "$1" && { [ -z "$2" ] || fcgi_answers "$2"; }
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
    local port=$1 pidfile=$2 logfile=$3 fport=${4:-} pid i
    local fargs=() where="127.0.0.1:$1"
    [ -n "$port" ] && [ -n "$pidfile" ] && [ -n "$logfile" ] \
        || die "usage: $0 start PORT PIDFILE LOGFILE [FCGI_PORT]"
    if [ -n "$fport" ]; then
        fargs=(--fcgi-port "$fport")
        where="$where, FastCGI 127.0.0.1:$fport"
    fi
    if pid=$(pid_of "$pidfile") && { [ -z "$fport" ] || has_fcgi "$pid" "$fport"; } \
            && ready "$port" "$fport"; then
        echo "backend: running (pid $pid, $where)"
        return 0
    fi
    stop "$pidfile" -q
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (scripts/deps.sh)"
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"

    setsid "$PYTHON" "$APP" --host 127.0.0.1 --port "$port" "${fargs[@]}" \
        --pidfile "$pidfile" --log "$logfile" \
        </dev/null >>"$logfile" 2>&1 &
    local spid=$!

    for ((i = 0; i < 100; i++)); do
        if ! alive "$spid"; then
            tail -n 15 "$logfile" >&2
            die "backend exited at startup (port $port${fport:+ or $fport} busy?)"
        fi
        [ -s "$pidfile" ] && ready "$port" "$fport" && break
        sleep 0.1
    done
    answers "$port" || { tail -n 15 "$logfile" >&2; die "no answer on port $port"; }
    [ -z "$fport" ] || fcgi_answers "$fport" \
        || { tail -n 15 "$logfile" >&2; die "no FastCGI answer on port $fport"; }
    echo "backend: started (pid $spid, $where, log $logfile)"
}

case ${1:-} in
    start)   start "${2:-}" "${3:-}" "${4:-}" "${5:-}" ;;
    restart) stop "${3:?pidfile}" -q; start "${2:-}" "${3:-}" "${4:-}" "${5:-}" ;;
    stop)    stop "${2:?pidfile}" "${3:-}" ;;
    status)
        if pid=$(pid_of "${2:?pidfile}"); then echo "backend: running (pid $pid)"
        else echo "backend: stopped"; exit 1; fi ;;
    *) echo "usage: $0 start|restart PORT PIDFILE LOGFILE [FCGI_PORT] | stop|status PIDFILE" >&2
       exit 2 ;;
esac
