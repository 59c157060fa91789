#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Build the libFuzzer targets into build/fuzz/ (clang, -fsanitize=fuzzer,
# address,undefined).  TEST-ONLY tooling, not part of the module.
#
#   fuzz/build.sh
#
# The module's key.c, keyscan.c, json.c (with yajl), record.c, entry.c
# and what they call are compiled as they are, against the
# headers of an nginx tree configured like the packaged binary (Debian's
# conf_flags, with --with-cc=clang), and linked with a few of nginx's
# core .c files from Debian's nginx source package (fuzz/nginx-src.sh)
# plus the test stubs in fuzz/ngx_fuzz.c.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/build/fuzz
NGINX_DEV=${NGINX_DEV:-/usr/share/nginx/src}

log() { echo "fuzz: $*" >&2; }

mkdir -p "$OUT"
exec 7>"$OUT/.build.lock"
flock 7

# clang with libFuzzer and the sanitizer runtimes, OpenSSL's headers
fuzzer_ok() {
    command -v clang >/dev/null 2>&1 || return 1
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }' \
        > "$OUT/.probe.c"
    clang -fsanitize=fuzzer,address,undefined -o "$OUT/.probe" "$OUT/.probe.c" \
        >/dev/null 2>&1
}

if ! fuzzer_ok || [ ! -f /usr/include/openssl/evp.h ] \
   || [ ! -f /usr/include/yajl/yajl_parse.h ]; then
    log "installing clang, libclang-rt-dev, libssl-dev, libyajl-dev"
    SUDO=
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends clang libclang-rt-dev libssl-dev \
        libyajl-dev >&2
    fuzzer_ok || { log "clang cannot build a libFuzzer target"; exit 1; }
fi
rm -f "$OUT/.probe" "$OUT/.probe.c"

src=$("$ROOT/fuzz/nginx-src.sh")

# configure a private copy of the tree once (configure writes into the
# tree); again only when the tree or the flags change
flags=
[ -f "$NGINX_DEV/conf_flags" ] && flags=$(cat "$NGINX_DEV/conf_flags")
sig="$src $(cat "$src/../version" 2>/dev/null) $(echo "$flags" | cksum)"

if [ ! -f "$OUT/nginx/.configured" ] || [ "$(cat "$OUT/nginx/.configured")" != "$sig" ]; then
    log "configure nginx for the fuzz build ($OUT/configure.log)"
    rm -rf "$OUT/nginx" "$OUT/objs" "$OUT/obj"
    cp -a "$src" "$OUT/nginx"
    (
        cd "$OUT/nginx"
        NGX_CONF_FLAGS=()
        [ -n "$flags" ] && . "$NGINX_DEV/conf_flags"
        # a relative --builddir: nginx's auto/make breaks an absolute one
        # that holds ".S" (the Makefile says how)
        ./configure "${NGX_CONF_FLAGS[@]}" --with-cc=clang \
            --builddir=../objs > "$OUT/configure.log" 2>&1
    ) || { tail -n 20 "$OUT/configure.log" >&2; log "configure failed"; exit 1; }
    echo "$sig" > "$OUT/nginx/.configured"
fi

make -s -f "$ROOT/fuzz/Makefile" ROOT="$ROOT" OUT="$OUT" NGX="$OUT/nginx" \
    -j"$(nproc 2>/dev/null || echo 2)"
