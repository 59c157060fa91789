#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Runs each fuzz/repro/asan/*.conf through `nginx -t` with the sanitizer
# build (scripts/asan.sh build) and the same sanitizer options as
# `make test-asan`; fails if any reports.  TEST-ONLY.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
A=$ROOT/build/asan
[ -x "$A/sbin/nginx" ] || { echo "run scripts/asan.sh build first" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for conf in "$ROOT"/fuzz/repro/asan/*.conf; do
    mkdir -p "$tmp/logs"
    sed "s|@MODULE@|$A/modules/ngx_http_idempotency_module.so|" "$conf" > "$tmp/nginx.conf"
    out=$(ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
          UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$ROOT/scripts/asan-ubsan.supp" \
          "$A/sbin/nginx" -p "$tmp/" -c nginx.conf -e "$tmp/logs/error.log" -t 2>&1)
    if grep -q 'runtime error\|ERROR: AddressSanitizer' <<< "$out"; then
        echo "FAIL ${conf#$ROOT/}:"
        grep -A4 'runtime error\|ERROR: AddressSanitizer' <<< "$out" | head -n 6 | sed 's/^/    /'
        rc=1
    else
        echo "ok   ${conf#$ROOT/}"
    fi
done
exit $rc
