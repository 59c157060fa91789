#!/usr/bin/env bash
# Run the Test::Nginx suite (called by `make test` / `make test-valgrind`,
# which set the TEST_NGINX_* environment).
#
#   scripts/run-tests.sh [prove arguments: files, directories, -v ...]
#
# Resets the store, starts a fresh test backend, runs prove, stops the
# backend whatever the result, and exits with prove's status.  Runs in the
# same checkout are serialized (they share ports and t/servroot).

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

: "${TEST_NGINX_BACKEND_PORT:=8091}"
TDIR=$ROOT/build/test
PIDFILE=$TDIR/backend.pid
LOGFILE=$TDIR/backend.log

mkdir -p "$TDIR"
exec 9>"$TDIR/.lock"
if ! flock -n 9; then
    echo "test: waiting for another test run in this checkout..." >&2
    flock 9
fi

stop_backend() {
    scripts/services.sh backend stop "$PIDFILE" -q 9>&- || true
}
trap stop_backend EXIT
trap 'exit 130' INT TERM

scripts/services.sh reset >/dev/null 9>&- || exit 1
: > "$LOGFILE"
scripts/services.sh backend restart "$TEST_NGINX_BACKEND_PORT" "$PIDFILE" "$LOGFILE" \
    "${TEST_NGINX_FCGI_PORT:-}" >/dev/null 9>&- || exit 1

if ! perl -MTest::Nginx::Socket -e1 >/dev/null 2>&1; then
    export PERL5LIB=$ROOT/t/lib${PERL5LIB:+:$PERL5LIB}
fi

if [ -n "${TEST_NGINX_USE_VALGRIND:-}" ] && ! command -v valgrind >/dev/null; then
    echo "test: valgrind not found (make deps)" >&2
    exit 1
fi

[ $# -gt 0 ] || set -- t/

echo "test: nginx ${TEST_NGINX_BINARY:-nginx}, module ${TEST_NGINX_LOAD_MODULES:-?}," \
     "mysql 127.0.0.1:${TEST_NGINX_MYSQL_PORT:-?}, redis 127.0.0.1:${TEST_NGINX_REDIS_PORT:-?}," \
     "backend 127.0.0.1:$TEST_NGINX_BACKEND_PORT${TEST_NGINX_FCGI_PORT:+ (FastCGI 127.0.0.1:$TEST_NGINX_FCGI_PORT)}${TEST_NGINX_USE_VALGRIND:+, valgrind}"

prove ${PROVE_FLAGS:-} -r "$@" 9>&-
rc=$?
stop_backend
trap - EXIT
exit $rc
