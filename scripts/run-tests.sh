#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
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

GRPC_PIDFILE=$TDIR/grpc.pid

stop_backend() {
    scripts/services.sh backend stop "$PIDFILE" -q 9>&- || true
    scripts/services.sh grpc stop "$GRPC_PIDFILE" -q 9>&- || true
}
trap stop_backend EXIT
trap 'exit 130' INT TERM

scripts/services.sh reset >/dev/null 9>&- || exit 1
: > "$LOGFILE"
scripts/services.sh backend restart "$TEST_NGINX_BACKEND_PORT" "$PIDFILE" "$LOGFILE" \
    >/dev/null 9>&- || exit 1
# the gRPC backend (t/090), when its npm package is there
if [ -n "${TEST_NGINX_GRPC_PORT:-}" ] && scripts/node-deps.sh --check 2>/dev/null 9>&-; then
    : > "$TDIR/grpc.log"
    scripts/services.sh grpc restart "$TEST_NGINX_GRPC_PORT" "$GRPC_PIDFILE" \
        "$TDIR/grpc.log" >/dev/null 9>&- || exit 1
fi

# The framework: an installed Test::Nginx (or one PERL5LIB names), else
# the snapshot of OpenResty's beside the project (../shared/test-nginx, as
# in CI), and only then the project's runner in t/lib.  Under valgrind
# always t/lib's, which fails a block on valgrind's reports (OpenResty's
# prints them and passes).
SHARED_TN=$(cd "$ROOT/.." && pwd)/shared/test-nginx/lib
if [ -n "${TEST_NGINX_USE_VALGRIND:-}" ]; then
    export PERL5LIB=$ROOT/t/lib${PERL5LIB:+:$PERL5LIB}
elif perl -MTest::Nginx::Socket -e1 >/dev/null 2>&1; then
    :
elif [ -f "$SHARED_TN/Test/Nginx/Socket.pm" ]; then
    export PERL5LIB=$SHARED_TN${PERL5LIB:+:$PERL5LIB}
else
    export PERL5LIB=$ROOT/t/lib${PERL5LIB:+:$PERL5LIB}
fi
TN=$(perl -MTest::Nginx::Socket -e 'print $INC{"Test/Nginx/Socket.pm"}' 2>/dev/null) \
    || { echo "test: Test::Nginx::Socket does not load" >&2; exit 1; }
TN=$(readlink -f "$TN")
case $TN in
    "$ROOT"/t/lib/*) echo "test: Test::Nginx: the project's runner ($TN)" ;;
    *) echo "test: Test::Nginx: OpenResty's ($TN)" ;;
esac

if [ -n "${TEST_NGINX_USE_VALGRIND:-}" ] && ! command -v valgrind >/dev/null; then
    echo "test: valgrind not found (make deps)" >&2
    exit 1
fi

[ $# -gt 0 ] || set -- t/

echo "test: nginx ${TEST_NGINX_BINARY:-nginx}, module ${TEST_NGINX_LOAD_MODULES:-?}," \
     "mysql 127.0.0.1:${TEST_NGINX_MYSQL_PORT:-?}, redis 127.0.0.1:${TEST_NGINX_REDIS_PORT:-?}," \
     "backend 127.0.0.1:$TEST_NGINX_BACKEND_PORT," \
     "php-fpm 127.0.0.1:${TEST_NGINX_PHPFPM_PORT:-?}, uwsgi 127.0.0.1:${TEST_NGINX_UWSGI_PORT:-?}${TEST_NGINX_USE_VALGRIND:+, valgrind}"

prove ${PROVE_FLAGS:-} -r "$@" 9>&-
rc=$?
stop_backend
trap - EXIT
exit $rc
