#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# make test-paths: the README's commands from a checkout where a user may
# put one, checked on throwaway clones of this checkout's HEAD:
#
#   1. under a folder only its owner may enter (mode 0700, as root's home
#      and every mktemp -d folder are) whose name holds ".S" (which
#      nginx's auto/make once rewrote in an absolute build directory):
#      make build, make run (its claim and replay answered), the PHP-FPM
#      and uWSGI tests and the sanity test through make test, then make
#      stop, after which none of its processes, sockets or pid files is
#      left;
#   2. the same clone's build and services as an ordinary user (nobody,
#      in a 0700 folder of its own), when run as root;
#   3. a path with a space: make stops at once with a message that says
#      so, before configure.
#
# The clones use ports of their own (PATHS_PORT_BASE, default 23300, and
# PATHS_NGINX_PORT, default 2084, for Test::Nginx), so
# that the services of this checkout may run meanwhile; everything goes
# at the end, pass or fail.  Needs the packages of scripts/deps.sh.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${PATHS_PORT_BASE:-23300}

# the clones' ports, each a make variable (README, Makefile)
PORTS=(MYSQL_PORT=$((BASE + 7)) MYSQL2_PORT=$((BASE + 8))
       REDIS_PORT=$((BASE + 80)) DEMO_PORT=$((BASE + 10))
       BACKEND_PORT=$((BASE + 11)) TEST_BACKEND_PORT=$((BASE + 21))
       PHPFPM_PORT=$((BASE + 24)) UWSGI_PORT=$((BASE + 25))
       TEST_GRPC_PORT=$((BASE + 23))
       # below 6554: t/000 listens on ten times it plus one
       TEST_NGINX_PORT=${PATHS_NGINX_PORT:-2084})

# the clones' tests run under the Test::Nginx this checkout's run under
# (scripts/run-tests.sh): an installed one, or the copy beside it
SHARED_TN=$(cd "$ROOT/.." && pwd)/shared/test-nginx/lib
if ! perl -MTest::Nginx::Socket -e1 >/dev/null 2>&1 \
        && [ -f "$SHARED_TN/Test/Nginx/Socket.pm" ]; then
    export PERL5LIB=$SHARED_TN${PERL5LIB:+:$PERL5LIB}
fi

TMP=$(mktemp -d /tmp/idem-paths.XXXXXX) || exit 1
TMPU=""
FAILS=0
T0=$SECONDS

log() { echo "paths: $*"; }
fail() { echo "paths: FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

# a checkout's services and demo, stopped whatever happened, then the
# folders removed
cleanup() {
    local d
    for d in "$TMP/checkout.S/idem" "${TMPU:+$TMPU/user.S/idem}"; do
        [ -n "$d" ] && [ -f "$d/Makefile" ] || continue
        if [ "$d" = "$TMP/checkout.S/idem" ]; then
            make -C "$d" "${PORTS[@]}" stop >/dev/null 2>&1
        else
            as_user make -C "$d" "${PORTS[@]}" stop >/dev/null 2>&1
        fi
    done
    rm -rf "$TMP" ${TMPU:+"$TMPU"}
}
trap cleanup EXIT
trap 'exit 130' INT TERM

as_user() {
    runuser -u nobody -- env HOME="$TMPU" PATH="$PATH" "$@"
}

# the processes whose command line or working directory is under $1
leftovers() {
    local p cwd
    for p in /proc/[0-9]*; do
        cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
        if [[ $cwd == "$1"* ]] \
            || tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -qF -- "$1"; then
            echo "${p#/proc/} $(tr '\0' ' ' < "$p/cmdline" | cut -c1-100)"
        fi
    done
}

clone() {
    mkdir -p "$(dirname "$1")"
    git clone -q --no-hardlinks "$ROOT" "$1" || return 1
    # a package cache of this checkout's (scripts/node-deps.sh): the
    # clone's tests need no download
    if [ -d "$ROOT/build/node/node_modules" ]; then
        mkdir -p "$1/build"
        cp -a "$ROOT/build/node" "$1/build/node"
    fi
}

# ---------------------------------------------------------- 1. 0700 + .S

D=$TMP/checkout.S/idem
log "clone under $TMP/checkout.S (mode $(stat -c %a "$TMP"))"
clone "$D" || { fail "git clone into $D"; exit 1; }

log "make build"
make -C "$D" "${PORTS[@]}" build > "$TMP/build.log" 2>&1 \
    || { tail -n 20 "$TMP/build.log"; fail "make build under $D"; }

if [ "$FAILS" = 0 ]; then
    log "make run"
    if make -C "$D" "${PORTS[@]}" run > "$TMP/run.log" 2>&1; then
        url="http://127.0.0.1:$((BASE + 10))/orders"
        a=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url" \
                -H 'Idempotency-Key: paths-1' -d '{"item":"book"}')
        b=$(curl -s -D - -o /dev/null -X POST "$url" \
                -H 'Idempotency-Key: paths-1' -d '{"item":"book"}' | tr -d '\r')
        [ "$a" = 201 ] || fail "make run: the first POST got $a, not 201"
        grep -qi '^Idempotent-Replayed: true' <<<"$b" \
            || fail "make run: the retry was not replayed: $(head -n 1 <<<"$b")"
        log "make run: 201, then the replay"
        # a body that nginx writes to a temp file under the checkout
        c=$(head -c 300000 /dev/zero | tr '\0' x | curl -s -o /dev/null \
                -w '%{http_code}' -X POST "$url" -H 'Idempotency-Key: paths-2' \
                --data-binary @-)
        [ "$c" = 201 ] || fail "make run: a 300 KB body got $c, not 201"
    else
        tail -n 20 "$TMP/run.log"
        fail "make run under $D"
    fi

    log "make test (sanity, PHP-FPM, uWSGI)"
    make -C "$D" "${PORTS[@]}" test FUZZ_TEST_SECONDS=0 \
        TEST_FILES='t/000-sanity.t t/085-php-fpm.t t/086-uwsgi.t' \
        > "$TMP/test.log" 2>&1 \
        || { tail -n 30 "$TMP/test.log"; fail "make test under $D"; }
    grep -E '^(Files|Result)' "$TMP/test.log" | sed 's/^/paths: /'

    log "make stop"
    make -C "$D" "${PORTS[@]}" stop > "$TMP/stop.log" 2>&1 \
        || { cat "$TMP/stop.log"; fail "make stop under $D"; }
    sleep 0.5
    left=$(leftovers "$D")
    [ -z "$left" ] || fail "processes left after make stop: $left"
    left=$(find "$D/build" \( -type s -o -name '*.pid' \) 2>/dev/null)
    [ -z "$left" ] || fail "sockets or pid files left after make stop: $left"
fi

# ------------------------------------------------- 2. an ordinary user

if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    TMPU=$(mktemp -d /tmp/idem-paths-user.XXXXXX)
    chown nobody: "$TMPU"
    U=$TMPU/user.S/idem
    log "as nobody: clone under $TMPU/user.S (mode $(stat -c %a "$TMPU"))"
    # cloned by root (nobody may not read this checkout), then given away
    if clone "$U" 2> "$TMP/uclone.log" && chown -R nobody: "$TMPU/user.S"; then
        if as_user make -C "$U" "${PORTS[@]}" build services \
                > "$TMP/user.log" 2>&1; then
            log "as nobody: make build services: started"
        else
            tail -n 20 "$TMP/user.log"
            fail "make build services as nobody under $U"
        fi
        as_user make -C "$U" "${PORTS[@]}" stop > "$TMP/ustop.log" 2>&1 \
            || { cat "$TMP/ustop.log"; fail "make stop as nobody"; }
        sleep 0.5
        left=$(leftovers "$U")
        [ -z "$left" ] || fail "processes left after make stop (nobody): $left"
    else
        cat "$TMP/uclone.log"
        fail "git clone into $U"
    fi
fi

# ------------------------------------------------------------- 3. a space

S="$TMP/with space/idem"
clone "$S" || fail "git clone into '$S'"
out=$(make -C "$S" build 2>&1)
rc=$?
if [ $rc = 0 ] || ! grep -q "path has a space" <<<"$out"; then
    fail "a path with a space: make build exited $rc with: $out"
elif [ -e "$S/build/nginx-obj/configure.log" ]; then
    fail "a path with a space: configure ran"
else
    log "a path with a space: $(grep -o 'the checkout.s path has a space.*' <<<"$out" | head -n 1)"
fi

if [ "$FAILS" = 0 ]; then
    log "passed in $((SECONDS - T0)) s"
    exit 0
fi
log "$FAILS failure(s) in $((SECONDS - T0)) s"
exit 1
