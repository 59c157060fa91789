#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Run the Test::Nginx suite (called by `make test` / `make test-valgrind`,
# which set the TEST_NGINX_* environment).
#
#   scripts/run-tests.sh [prove arguments: files, directories, -v ...]
#
# Finds OpenResty's Test::Nginx, starts the private services
# (scripts/services.sh) that are not running, resets the store, starts a
# fresh test backend, runs prove, stops the backend and the services it
# started whatever the result (KEEP_SERVICES=1: the services stay), and
# exits with prove's status.  Runs in the same checkout are serialized
# (they share ports and t/servroot): a run stops its services only once
# the next one may start them again.
#
# Under valgrind (TEST_NGINX_USE_VALGRIND, `make test-valgrind`) it uses
# Test::Nginx's valgrind mode with t/valgrind.suppress, and fails the run
# when valgrind reported an error or a definite leak: Test::Nginx prints
# those reports and passes.

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

# The framework is OpenResty's Test::Nginx: an installed one (or one
# PERL5LIB names, or one an earlier run put into build/perl5), else one
# installed from CPAN into build/perl5 when CPAN answers, else the copy
# beside the project (../shared/test-nginx, as in CI).
LOCAL_TN=$ROOT/build/perl5
SHARED_TN=$(cd "$ROOT/.." && pwd)/shared/test-nginx/lib
if [ -d "$LOCAL_TN/lib/perl5" ]; then
    export PERL5LIB=$LOCAL_TN/lib/perl5${PERL5LIB:+:$PERL5LIB}
fi

tn_loads() { perl -MTest::Nginx::Socket -e1 >/dev/null 2>&1; }

# asks the CPAN client (and so its own default mirror) about Test::Nginx
# with a short timeout, so that a machine without CPAN goes on at once;
# the client's state stays under build/, not in ~/.cpan or ~/.cpanm
tn_from_cpan() {
    local home=$ROOT/build/cpan-home
    mkdir -p "$home"
    if command -v cpanm >/dev/null; then
        HOME=$home timeout 15 cpanm --info Test::Nginx >/dev/null 2>&1 || return 1
        echo "test: installing Test::Nginx from CPAN into build/perl5 (cpanm)" >&2
        HOME=$home cpanm -q -n -L "$LOCAL_TN" Test::Nginx >&2 || return 1
    elif command -v cpan >/dev/null; then
        # cpan exits 0 when it cannot fetch its index: look for the answer
        HOME=$home PERL_MM_USE_DEFAULT=1 timeout 15 cpan -D Test::Nginx \
            </dev/null 2>/dev/null | grep -q '^[[:space:]]*CPAN:[[:space:]]*v\?[0-9]' \
            || return 1
        echo "test: installing Test::Nginx from CPAN into build/perl5 (cpan)" >&2
        HOME=$home PERL_MM_USE_DEFAULT=1 PERL_MM_OPT="INSTALL_BASE=$LOCAL_TN" \
            PERL_MB_OPT="--install_base $LOCAL_TN" timeout 600 cpan -T Test::Nginx \
            </dev/null >&2 || return 1
    else
        return 1
    fi
    export PERL5LIB=$LOCAL_TN/lib/perl5${PERL5LIB:+:$PERL5LIB}
    tn_loads
}

if tn_loads; then
    :
elif tn_from_cpan 9>&-; then
    :
elif [ -f "$SHARED_TN/Test/Nginx/Socket.pm" ]; then
    export PERL5LIB=$SHARED_TN${PERL5LIB:+:$PERL5LIB}
else
    cat >&2 <<MSG
test: OpenResty's Test::Nginx was not found.  Any one of these will do:
  - an installed one: cpanm Test::Nginx, cpan Test::Nginx, or its lib/
    directory on PERL5LIB;
  - a CPAN client (cpanm or cpan) that reaches CPAN: this script then
    installs Test::Nginx into build/perl5 itself;
  - a copy of OpenResty's test-nginx repository at
    $(dirname "$SHARED_TN") (its lib/ is used, as in CI).
MSG
    exit 1
fi
TN=$(perl -MTest::Nginx::Socket -e 'print $INC{"Test/Nginx/Socket.pm"}' 2>/dev/null) \
    || { echo "test: Test::Nginx::Socket does not load" >&2; exit 1; }
echo "test: Test::Nginx: $(readlink -f "$TN")"

VG_OUT=
if [ -n "${TEST_NGINX_USE_VALGRIND:-}" ]; then
    if ! command -v valgrind >/dev/null; then
        echo "test: valgrind not found (make deps)" >&2
        exit 1
    fi
    # Test::Nginx's own options for "1", with the project's suppressions
    # (it looks for them in ./valgrind.suppress only); a value that is
    # not a number is passed to valgrind as it is
    case $TEST_NGINX_USE_VALGRIND in
        *[!0-9]*) ;;
        *) vg="--tool=memcheck --leak-check=full --show-possibly-lost=no"
           vg+=" --keep-debuginfo=yes --num-callers=100 --gen-suppressions=all"
           export TEST_NGINX_USE_VALGRIND="$vg --suppressions=$ROOT/t/valgrind.suppress" ;;
    esac
    VG_OUT=$TDIR/valgrind.out
fi

# valgrind's reports in the run's output ($1), each under the name of the
# block whose nginx made it (Test::Nginx prints it before starting
# nginx): the blocks with an error or a definite leak, and 1 if any
valgrind_check() {
    awk '
        # the name alone; its warnings start with it
        /^t\/[^ ]+\.t TEST / { if (block == "" || index($0, block) != 1) block = $0 }
        /^==[0-9]+== / && /Invalid (read|write|free)|Mismatched free|uninitialised|unaddressable|Source and destination overlap|definitely lost in loss record|fishy value|Process terminating/ {
            n++
            sub(/^==[0-9]+== /, "")
            if (block != last) { print "  " block; last = block }
            print "    " $0
        }
        END { exit n > 0 }
    ' "$1" > "$TDIR/valgrind.errors"
    local rc=$?
    if [ $rc != 0 ]; then
        echo "test: valgrind reported errors (the whole output: $1):" >&2
        cat "$TDIR/valgrind.errors" >&2
    else
        echo "test: valgrind reported no error and no definite leak"
    fi
    return $rc
}

GRPC_PIDFILE=$TDIR/grpc.pid
STARTED=$TDIR/services.started

stop_backend() {
    scripts/services.sh backend stop "$PIDFILE" -q 9>&- || true
    scripts/services.sh grpc stop "$GRPC_PIDFILE" -q 9>&- || true
    case ${KEEP_SERVICES:-0} in
        0|'') scripts/services.sh stop --started "$STARTED" 9>&- || true ;;
        *)    rm -f "$STARTED" ;;
    esac
}
trap stop_backend EXIT
trap 'exit 130' INT TERM

# MariaDB, Redis, PHP-FPM and uWSGI; those that were running before are
# not noted in $STARTED, so stay
scripts/services.sh start --started "$STARTED" 9>&- || exit 1
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

[ $# -gt 0 ] || set -- t/

echo "test: nginx ${TEST_NGINX_BINARY:-nginx}, module ${TEST_NGINX_LOAD_MODULES:-?}," \
     "mysql 127.0.0.1:${TEST_NGINX_MYSQL_PORT:-?}, redis 127.0.0.1:${TEST_NGINX_REDIS_PORT:-?}," \
     "backend 127.0.0.1:$TEST_NGINX_BACKEND_PORT," \
     "php-fpm 127.0.0.1:${TEST_NGINX_PHPFPM_PORT:-?}, uwsgi 127.0.0.1:${TEST_NGINX_UWSGI_PORT:-?}${VG_OUT:+, valgrind}"

if [ -n "$VG_OUT" ]; then
    prove ${PROVE_FLAGS:-} -r "$@" 9>&- 2>&1 | tee "$VG_OUT"
    rc=${PIPESTATUS[0]}
    valgrind_check "$VG_OUT" || { [ $rc != 0 ] || rc=1; }
else
    prove ${PROVE_FLAGS:-} -r "$@" 9>&-
    rc=$?
fi
stop_backend
trap - EXIT
exit $rc
