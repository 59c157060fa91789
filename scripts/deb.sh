#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Build the Debian package libnginx-mod-http-idempotency (make deb).
#
#   scripts/deb.sh
#
# The package is built the way Debian builds its own libnginx-mod-*
# packages: debian/rules is plain `dh $@` with dh-sequence-nginx (from
# nginx-dev), which configures the module against /usr/share/nginx/src with
# the packaged nginx's flags, checks that /usr/sbin/nginx loads it, and has
# dh_nginx write mod-http-idempotency.conf, the maintainer scripts that
# enable it, and the dependency on the nginx ABI.  The version is the one of
# debian/changelog.
#
# The source is staged in build/deb/src/ (dpkg-buildpackage writes its
# artefacts next to and inside the tree it builds, never in the checkout);
# the .deb, the -dbgsym .deb, .buildinfo, .changes and build.log end up in
# build/deb/.  lintian then checks the .deb (errors and warnings fail).
# Missing build dependencies (debian/control's Build-Depends, lintian) are
# installed with apt-get, no service being started meanwhile.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEB_WHO=deb
. "$ROOT/scripts/deb-common.sh"

deb_lock "$0" "$@"

OUT=$ROOT/build/deb
cd "$ROOT"

# ------------------------------------------------------- build dependencies

build_deps_met() {
    command -v dpkg-checkbuilddeps >/dev/null 2>&1 \
        && command -v dpkg-parsechangelog >/dev/null 2>&1 \
        && command -v lintian >/dev/null 2>&1 \
        && dpkg-checkbuilddeps "$ROOT/debian/control" >/dev/null 2>&1
}

not_installed() {    # the packages among $@ that are not installed
    local p
    for p in "$@"; do
        case $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) in
            ii*) ;;
            *) echo "$p" ;;
        esac
    done
}

if ! build_deps_met; then
    echo "deb: installing the build dependencies (debian/control) and lintian"
    deb_apt update -qq
    mapfile -t tools < <(not_installed build-essential dpkg-dev lintian)
    if [ ${#tools[@]} -gt 0 ]; then
        deb_apt install -y --no-install-recommends "${tools[@]}"
    fi
    # Build-Depends exactly as debian/control states them
    deb_apt build-dep -y --no-install-recommends "$ROOT/"
    dpkg-checkbuilddeps "$ROOT/debian/control" \
        || deb_die "build dependencies still unmet"
fi

SOURCE=$(deb_version Source)
VERSION=$(deb_version Version)
UPSTREAM=${VERSION%-*}
ARCH=$(dpkg-architecture -qDEB_HOST_ARCH)
DEB=${DEB_PACKAGE}_${VERSION}_${ARCH}.deb

# ------------------------------------------------------------------ staging

STAGE=$OUT/src
TREE=$STAGE/$SOURCE-$UPSTREAM
rm -rf "$STAGE"
mkdir -p "$TREE"
rm -f "$OUT"/*.deb "$OUT"/*.buildinfo "$OUT"/*.changes "$OUT"/build.log

# The files of the checkout as they are now (tracked and new ones, less
# what .gitignore leaves out: build/, t/servroot ...), like `make build`.
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do
              [ -e "$f" ] && printf '%s\0' "$f"
          done \
        | tar -C "$ROOT" --null -T - -cf - \
        | tar -C "$TREE" -xf -
else
    tar -C "$ROOT" -cf - config ngx_http_idempotency_module mysql docs \
        README.md debian | tar -C "$TREE" -xf -
fi
# nothing of a build made by hand in a checkout's debian/
rm -rf "$TREE"/debian/.debhelper "$TREE"/debian/"$DEB_PACKAGE" \
       "$TREE"/debian/files "$TREE"/debian/*.substvars \
       "$TREE"/debian/*.debhelper.log "$TREE"/debian/debhelper-build-stamp \
       "$TREE"/debian/tmp "$TREE"/obj-*

# -------------------------------------------------------------------- build

echo "deb: building $SOURCE $VERSION ($TREE, log build/deb/build.log)"
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }parallel=$(nproc)"
if ! (cd "$TREE" && dpkg-buildpackage -b -us -uc) > "$OUT/build.log" 2>&1; then
    tail -n 40 "$OUT/build.log" >&2
    deb_die "dpkg-buildpackage failed (build/deb/build.log)"
fi

shopt -s nullglob
for f in "$STAGE"/*.deb "$STAGE"/*.buildinfo "$STAGE"/*.changes; do
    mv -f "$f" "$OUT/"
done
shopt -u nullglob
[ -f "$OUT/$DEB" ] || deb_die "$DEB was not built (build/deb/build.log)"
rm -rf "$STAGE"

echo "deb: built build/deb/$DEB"
dpkg-deb -f "$OUT/$DEB" Package Version Architecture Depends | sed 's/^/  /'
dpkg-deb -c "$OUT/$DEB" | awk '{ print "  " $6 ($7 ? " " $7 " " $8 : "") }' \
    | grep -v '/$'

# ------------------------------------------------------------------ lintian

# lintian would rather not run as root: as nobody, on a copy it can read
LINT=(lintian)
LINT_DEB=$OUT/$DEB
LINT_DIR=
if [ "$(id -u)" -eq 0 ] && command -v runuser >/dev/null 2>&1 \
        && id nobody >/dev/null 2>&1; then
    LINT_DIR=$(mktemp -d /tmp/idem-lintian.XXXXXX)
    trap 'rm -rf "$LINT_DIR"' EXIT
    cp "$OUT/$DEB" "$LINT_DIR/"
    chmod 755 "$LINT_DIR"
    chmod 644 "$LINT_DIR/$DEB"
    LINT_DEB=$LINT_DIR/$DEB
    LINT=(runuser -u nobody -- env HOME="$LINT_DIR" lintian)
fi
echo "deb: lintian build/deb/$DEB"
(cd "${LINT_DIR:-$OUT}" && "${LINT[@]}" --info --display-info \
    --fail-on error,warning "$LINT_DEB") \
    || deb_die "lintian found problems in $DEB"
echo "deb: lintian clean"
