#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Fetch Debian's nginx source package (the sources of the packaged binary,
# Debian's patches applied) into build/debian-src/ and print the path of
# the unpacked tree.  Used by the fuzz build (nginx's core .c files) and
# by scripts/asan.sh (a sanitizer build of nginx itself).
#
#   fuzz/nginx-src.sh          fetch if missing; print the tree's path
#
# On a fresh Debian 12 machine it installs dpkg-dev (dpkg-source) and adds
# deb-src entries derived from the system's own bookworm "deb" entries
# (/etc/apt/sources.list.d/idempotency-deb-src.sources), then runs
# apt-get update once.  Nothing is written into the repository.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=$ROOT/build/debian-src
SRCLIST=/etc/apt/sources.list.d/idempotency-deb-src.sources

log() { echo "nginx-src: $*" >&2; }
die() { log "$*"; exit 1; }

mkdir -p "$DEST"
exec 8>"$DEST/.lock"
flock 8

# the version of the packaged binary (falls back to nginx-dev's, then to
# whatever apt offers)
want=$(dpkg-query -W -f='${Version}' nginx 2>/dev/null \
       || dpkg-query -W -f='${Version}' nginx-dev 2>/dev/null || true)
upstream=${want#*:}
upstream=${upstream%-*}
[ -n "$upstream" ] || upstream=1.22.1

tree=$DEST/nginx-$upstream
if [ -f "$tree/.fetched" ]; then
    echo "$tree"
    exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "need root (or sudo) for apt-get"
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive

updated=
apt_update() {
    [ -n "$updated" ] && return 0
    log "apt-get update"
    $SUDO apt-get update -qq >&2 || log "warning: apt-get update reported errors"
    updated=1
}

if ! command -v dpkg-source >/dev/null 2>&1; then
    apt_update
    log "installing dpkg-dev"
    $SUDO apt-get install -y -q --no-install-recommends dpkg-dev >&2
fi

has_deb_src() {
    grep -Eqs '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources
}

if ! has_deb_src; then
    # the system's own bookworm entries, as deb-src (deb822 and one-line)
    tmp=$(mktemp)
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            function flush() {
                if (n && types && suite) {
                    for (i = 1; i <= n; i++) print para[i]
                    print ""
                }
                n = 0; types = 0; suite = 0
            }
            /^[[:space:]]*$/ { flush(); next }
            /^#/ { next }
            /^Types:/ {
                if ($0 ~ /[[:space:]]deb([[:space:]]|$)/) types = 1
                para[++n] = "Types: deb-src"; next
            }
            /^Suites:/ {
                if ($0 ~ /[[:space:]]bookworm([[:space:]]|$|-)/) suite = 1
            }
            { para[++n] = $0 }
            END { flush() }
        ' "$f" >> "$tmp"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        # one-line format: "deb [opts] URI SUITE COMPONENTS..."
        sed -n -E 's/^[[:space:]]*deb([[:space:]].*[[:space:]]bookworm(-[a-z]+)?[[:space:]].*)$/deb-src\1/p' \
            "$f" > "$tmp.list.$$" || true
        if [ -s "$tmp.list.$$" ]; then
            $SUDO cp "$tmp.list.$$" "${SRCLIST%.sources}.list"
        fi
        rm -f "$tmp.list.$$"
    done
    if [ -s "$tmp" ]; then
        $SUDO cp "$tmp" "$SRCLIST"
        $SUDO chmod 644 "$SRCLIST"
        log "added deb-src entries: $SRCLIST"
    fi
    rm -f "$tmp"
    has_deb_src || die "no bookworm entries to derive deb-src from; add a deb-src line for bookworm to /etc/apt/sources.list.d/"
    apt_update
fi

fetch() {
    (cd "$DEST" && apt-get source -q "$@" >"$DEST/apt-source.log" 2>&1)
}

# the installed version first, then every other version apt knows the
# source of, newest first (a mirror may lack the newest security upload)
versions() {
    [ -n "$want" ] && echo "$want"
    apt-cache showsrc nginx 2>/dev/null \
        | sed -n 's/^Version: //p' | sort -u -r -V | grep -vxF "${want:-none}"
}

rm -rf "$tree"
got=
for attempt in 1 2; do
    for v in $(versions); do
        log "apt-get source nginx=$v (into $DEST)"
        if fetch "nginx=$v"; then got=$v; break 2; fi
        log "nginx=$v: not fetched ($(grep -m1 '^E:' "$DEST/apt-source.log" || echo '?'))"
    done
    [ -n "$updated" ] && break
    apt_update
done
[ -n "$got" ] || { tail -n 20 "$DEST/apt-source.log" >&2; die "apt-get source nginx failed"; }
[ "$got" = "$want" ] || log "note: packaged binary is $want, source is $got"
echo "$got" > "$DEST/version"

if [ ! -f "$tree/src/core/ngx_palloc.c" ]; then
    found=$(ls -d "$DEST"/nginx-*/ 2>/dev/null | head -n 1)
    [ -n "$found" ] && [ -f "$found/src/core/ngx_palloc.c" ] \
        || die "no nginx tree in $DEST (see $DEST/apt-source.log)"
    tree=${found%/}
fi

touch "$tree/.fetched"
log "nginx source: $tree"
echo "$tree"
