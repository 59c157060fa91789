#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# The version matrix (make test-matrix): for each supported nginx version,
# nginx built from source (--with-compat, --with-debug and the modules the
# suite uses: MATRIX_FLAGS), the module built against that tree, and the
# whole suite run against that binary.  Then a build of the current stable
# without --with-debug (nginx compiles with -Werror), to show that the
# module has no code that only debug builds compile.
#
#   scripts/matrix.sh [VERSION...]      default: every supported version
#
# Sources: 1.22.1 is Debian's source package of the packaged nginx
# (fuzz/nginx-src.sh; nginx-dev's /usr/share/nginx/src has the headers
# only, not enough to build nginx); the others are the tarballs in
# ../shared/nginx/ (NGINX_TARBALLS), checked against its SHA256SUMS and
# unpacked into build/matrix/<version>/src.  Nothing of them is committed.
# Each version has build/matrix/<version>/ to itself: src/, obj/ (nginx's
# objects, obj/nginx), the module's .so, build.log and test.log.
#
# Environment: the ports of `make test` (MYSQL_PORT, MYSQL2_PORT,
# REDIS_PORT, TEST_BACKEND_PORT, TEST_NGINX_PORT, PHPFPM_PORT, UWSGI_PORT,
# TEST_GRPC_PORT),
# TEST_FILES and PROVE_FLAGS are passed on to each run; the fault run
# that ends `make test` (scripts/faults/, fixed ports) is left out unless
# FAULTS_TEST=1.
#
# Prints the table (version, source, build, tests passed and failed,
# seconds) and writes it to build/matrix/summary.md; exits 1 unless every
# version built and passed.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

VERSIONS=(1.22.1 1.24.0 1.26.3 1.28.3 1.30.4 1.31.4)
NODEBUG_VERSION=1.30.4
TARBALLS=${NGINX_TARBALLS:-$(cd "$ROOT/.." && pwd)/shared/nginx}
M=$ROOT/build/matrix
MODULE=ngx_http_idempotency_module

# what t/*.t use beyond nginx's defaults (gzip, mirror, proxy, fastcgi,
# map, ... are built in): HTTP/2, TLS, sub_filter; and the rest of what
# Debian's binary has statically, so that a test's directive is there
# on every version as it is in the packaged nginx
FLAGS=(--with-threads --with-http_ssl_module --with-http_v2_module
       --with-http_realip_module --with-http_auth_request_module
       --with-http_sub_module --with-http_addition_module
       --with-http_stub_status_module --with-http_gunzip_module
       --with-http_slice_module --with-http_dav_module)
[ -n "${MATRIX_FLAGS:-}" ] && read -r -a FLAGS <<< "$MATRIX_FLAGS"

PORTS=()
for v in MYSQL_PORT MYSQL2_PORT REDIS_PORT TEST_BACKEND_PORT TEST_NGINX_PORT \
         PHPFPM_PORT UWSGI_PORT TEST_GRPC_PORT; do
    [ -n "${!v:-}" ] && PORTS+=("$v=${!v}")
done

log() { echo "matrix: $*" >&2; }

[ $# -gt 0 ] && VERSIONS=("$@")
mkdir -p "$M"
exec 8>"$M/.lock"
if ! flock -n 8; then
    log "waiting for another matrix run in this checkout..."
    flock 8
fi

# unpacks the source of version $1 into $M/$1/src (once); prints where
# it came from, or fails with the reason
source_tree() {
    local v=$1 dir=$M/$1 tgz sum deb

    mkdir -p "$dir"

    if [ "$v" = 1.22.1 ]; then
        deb=$(fuzz/nginx-src.sh 2>>"$dir/source.log" 8>&-) \
            || { echo "apt-get source failed ($dir/source.log)"; return 1; }
        if [ ! -f "$dir/src/.from" ] || [ "$(cat "$dir/src/.from")" != "$deb" ]; then
            rm -rf "$dir/src"
            mkdir -p "$dir"
            cp -a "$deb" "$dir/src" && echo "$deb" > "$dir/src/.from" \
                || { echo "cannot copy $deb"; return 1; }
        fi
        echo "Debian source $(cat "${deb%/*}/version" 2>/dev/null || echo '?')"
        return 0
    fi

    tgz=$TARBALLS/nginx-$v.tar.gz
    [ -f "$tgz" ] || { echo "no $tgz"; return 1; }
    sum=$(awk -v f="nginx-$v.tar.gz" '$2 == f { print $1 }' "$TARBALLS/SHA256SUMS" 2>/dev/null)
    [ -n "$sum" ] || { echo "nginx-$v.tar.gz not in $TARBALLS/SHA256SUMS"; return 1; }
    echo "$sum  $tgz" | sha256sum -c --status - \
        || { echo "nginx-$v.tar.gz: SHA-256 mismatch"; return 1; }

    if [ ! -f "$dir/src/.from" ] || [ "$(cat "$dir/src/.from")" != "$sum" ]; then
        rm -rf "$dir/src" "$dir/nginx-$v"
        mkdir -p "$dir"
        tar -xzf "$tgz" -C "$dir" || { echo "cannot unpack $tgz"; return 1; }
        mv "$dir/nginx-$v" "$dir/src" && echo "$sum" > "$dir/src/.from" \
            || { echo "no nginx-$v/ in $tgz"; return 1; }
    fi
    echo "tarball, SHA-256 ok"
}

# make with the tree, build directory and .so of version $1 and flags $2
mk() {
    local v=$1 flags=$2 dir=$M/$1
    shift 2
    make -C "$ROOT" NGINX_SRC="$M/${v%-*}/src" NGINX_OBJ="$dir/obj" \
        MODULE_SO="$dir/$MODULE.so" CUSTOM_CONF_FLAGS="$flags" "$@" 8>&-
}

ROWS=()
rc=0

for v in "${VERSIONS[@]}"; do
    dir=$M/$v
    mkdir -p "$dir"
    t0=$SECONDS
    log "nginx $v: source"
    if ! from=$(source_tree "$v" 2>&1); then
        log "nginx $v: $from"
        ROWS+=("| $v | $from | no | - | - | - |")
        rc=1
        continue
    fi

    flags="--with-debug ${FLAGS[*]}"
    log "nginx $v: build nginx and the module ($dir/build.log)"
    if ! mk "$v" "$flags" build nginx-bin > "$dir/build.log" 2>&1; then
        tail -n 20 "$dir/build.log" >&2
        ROWS+=("| $v | $from | **failed** | - | - | $((SECONDS - t0)) |")
        rc=1
        continue
    fi
    tb=$((SECONDS - t0))

    log "nginx $v: $("$dir/obj/nginx" -v 2>&1); the suite ($dir/test.log)"
    t1=$SECONDS
    mk "$v" "$flags" test NGINX_BIN="$dir/obj/nginx" FUZZ_TEST_SECONDS=0 \
        FAULTS_TEST="${FAULTS_TEST:-0}" \
        "${PORTS[@]}" ${TEST_FILES:+TEST_FILES="$TEST_FILES"} \
        ${PROVE_FLAGS:+PROVE_FLAGS="$PROVE_FLAGS"} > "$dir/test.log" 2>&1
    trc=$?
    tt=$((SECONDS - t1))

    # prove's summary: Files=, Tests=N, and a line per failed file
    # "t/x.t (Wstat: W Tests: T Failed: F)"
    total=$(sed -n 's/^Files=[0-9]*, Tests=\([0-9]*\),.*/\1/p' "$dir/test.log" | tail -n 1)
    failed=$(sed -n 's/^t\/.*(Wstat: .* Failed: \([0-9]*\)).*/\1/p' "$dir/test.log" \
             | awk '{ n += $1 } END { print n + 0 }')
    files=$(grep -c '^t/.*(Wstat: ' "$dir/test.log")
    total=${total:-0}
    passed=$((total - failed))
    if [ $trc -ne 0 ]; then
        rc=1
        failed="$failed ($files files$([ "$files" = 0 ] && echo ", prove exit $trc"))"
        grep -E -A2 '^t/.*\(Wstat: ' "$dir/test.log" | head -n 30 >&2
    fi
    log "nginx $v: $passed passed, $failed failed (build ${tb}s, tests ${tt}s)"
    ROWS+=("| $v | $from | yes (${tb} s) | $passed | $failed | $tt |")
done

# the current stable without --with-debug: nginx's own -Werror
nd=$NODEBUG_VERSION-nodebug
if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -qxF "$NODEBUG_VERSION"; then
    t0=$SECONDS
    log "nginx $NODEBUG_VERSION without --with-debug ($M/$nd/build.log)"
    mkdir -p "$M/$nd"
    if from=$(source_tree "$NODEBUG_VERSION" 2>&1) \
       && mk "$nd" "${FLAGS[*]}" build nginx-bin > "$M/$nd/build.log" 2>&1; then
        werror=$(grep -q -- '-Werror' "$M/$nd/obj/Makefile" && echo ', -Werror')
        ROWS+=("| $NODEBUG_VERSION, no --with-debug | $from | yes$werror ($((SECONDS - t0)) s) | not run | - | - |")
    else
        tail -n 20 "$M/$nd/build.log" >&2
        ROWS+=("| $NODEBUG_VERSION, no --with-debug | ${from:-?} | **failed** | not run | - | $((SECONDS - t0)) |")
        rc=1
    fi
fi

{
    echo "make test-matrix, $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$ROOT" describe --always --dirty 2>/dev/null)"
    echo
    echo "| nginx | source | build | tests passed | failed | test seconds |"
    echo "|---|---|---|--:|--:|--:|"
    printf '%s\n' "${ROWS[@]}"
} > "$M/summary.md"
cat "$M/summary.md"
exit $rc
