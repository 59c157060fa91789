#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Install the Debian 12 packages needed to build, run and test the module.
#
#   scripts/deps.sh           install what is missing (quiet when nothing is)
#   scripts/deps.sh --check   list missing packages; exit 1 if any
#   scripts/deps.sh --list    print the package list
#
# Services are never started by the package scripts: a policy-rc.d that
# denies every action is in place during the installation (there is no
# systemd here; the private instances are run by scripts/services.sh).

set -euo pipefail

PACKAGES=(
    # build: the module, and nginx itself from source for make test-matrix
    # (PCRE2, zlib and OpenSSL for its rewrite, gzip and ssl modules)
    build-essential nginx nginx-dev libmariadb-dev libhiredis-dev
    libssl-dev libpcre2-dev zlib1g-dev
    # the key's json= sources: yajl's streaming parser
    libyajl-dev
    # services
    mariadb-server mariadb-client redis-server
    # tests: Test::Nginx's dependencies, the backend, valgrind
    perl libtest-base-perl libtest-longstring-perl libtext-diff-perl
    liblist-moreutils-perl liburi-perl libhttp-message-perl
    libio-socket-ssl-perl python3 valgrind
    # the real FastCGI and uwsgi backends of t/085 and t/086 (their own
    # instances, started by scripts/services.sh, never the system's)
    php8.2-fpm uwsgi-core uwsgi-plugin-python3
    # the demo backend's withdrawals (backend/withdraw.py, t/048)
    python3-pymysql
    # t/190-tls.t makes its CA and certificates; t/330 and t/335 check
    # the metrics with promtool and a private Prometheus server
    openssl prometheus
    # tools used by the scripts, the demo and benchmarks
    curl wrk procps iproute2 util-linux
)

missing() {
    local p st
    for p in "${PACKAGES[@]}"; do
        st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
        case $st in
            ii*) ;;
            *) echo "$p" ;;
        esac
    done

    # the Node.js test clients (t/tools/): Debian's, unless a node and an
    # npm are there already (a newer Node.js brings its own npm)
    command -v node >/dev/null 2>&1 || echo nodejs
    command -v npm >/dev/null 2>&1 || echo npm
}

case ${1:-} in
    --list)  printf '%s\n' "${PACKAGES[@]}"; exit 0 ;;
    --check)
        todo=$(missing)
        if [ -n "$todo" ]; then echo "missing:" $todo; exit 1; fi
        exit 0 ;;
    "") ;;
    *) echo "usage: $0 [--check|--list]" >&2; exit 2 ;;
esac

command -v dpkg-query >/dev/null 2>&1 \
    || { echo "deps: dpkg-query not found: this script is for Debian 12" >&2; exit 1; }

mapfile -t todo < <(missing)
[ ${#todo[@]} -eq 0 ] && exit 0

echo "deps: installing ${todo[*]}"

SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 \
        || { echo "deps: need root (or sudo) to install: ${todo[*]}" >&2; exit 1; }
    SUDO=sudo
fi

POLICY=/usr/sbin/policy-rc.d
BACKUP=
if [ -e "$POLICY" ]; then
    BACKUP=$(mktemp /tmp/policy-rc.d.XXXXXX)
    $SUDO cp -p "$POLICY" "$BACKUP"
fi

restore_policy() {
    if [ -n "$BACKUP" ]; then
        $SUDO cp -p "$BACKUP" "$POLICY"
        $SUDO rm -f "$BACKUP"
    else
        $SUDO rm -f "$POLICY"
    fi
}
trap restore_policy EXIT

# exit status 101: "action forbidden by policy" (invoke-rc.d(8))
printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
$SUDO chmod 755 "$POLICY"

export DEBIAN_FRONTEND=noninteractive
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends -o Dpkg::Use-Pty=0 "${todo[@]}"

echo "deps: done"
