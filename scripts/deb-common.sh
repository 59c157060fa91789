# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Shared by scripts/deb.sh and scripts/test-deb.sh (sourced, not run).
#
#   deb_lock "$0" "$@"    re-run the calling script under the lock that
#                         builds and suite runs of this checkout share
#                         (IDEM_MAKE_LOCK [/tmp/idem-make.lock]), unless
#                         the caller or one of its ancestors holds it
#   deb_apt ARGS...       apt-get ARGS with no service started by the
#                         package scripts (the policy-rc.d of scripts/deps.sh)
#   deb_version FIELD     Source, Version, ... of debian/changelog, the
#                         one place the package's version comes from

IDEM_MAKE_LOCK=${IDEM_MAKE_LOCK:-/tmp/idem-make.lock}
DEB_PACKAGE=libnginx-mod-http-idempotency

deb_die() { echo "${DEB_WHO:-deb}: $*" >&2; exit 1; }

# An ancestor is `flock ... $IDEM_MAKE_LOCK ...` (for example
# `flock -o /tmp/idem-make.lock make deb`): taking the lock again would wait
# for ever, since flock(1) opens the file anew.
deb_lock_held_above() {
    local pid=$$ stat
    while [ "$pid" -gt 1 ]; do
        stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
        stat=${stat##*) }
        pid=$(echo "$stat" | cut -d' ' -f2)
        [ "$pid" -gt 1 ] || return 1
        if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null \
                | grep -q "^[^ ]*flock .*$IDEM_MAKE_LOCK"; then
            return 0
        fi
    done
    return 1
}

deb_lock() {
    [ -n "${IDEM_MAKE_LOCKED:-}" ] && return 0
    deb_lock_held_above && return 0
    command -v flock >/dev/null 2>&1 || return 0
    export IDEM_MAKE_LOCKED=1
    if ! flock -n "$IDEM_MAKE_LOCK" true 2>/dev/null; then
        echo "${DEB_WHO:-deb}: waiting for $IDEM_MAKE_LOCK (another build or suite run)"
    fi
    exec flock -o "$IDEM_MAKE_LOCK" "$@"
}

deb_apt() {
    [ "$(id -u)" -eq 0 ] || deb_die "need root for apt-get $*"
    (
        policy=/usr/sbin/policy-rc.d backup=""
        if [ -e "$policy" ]; then
            backup=$(mktemp /tmp/policy-rc.d.XXXXXX)
            cp -p "$policy" "$backup"
        fi
        restore() {
            if [ -n "$backup" ]; then
                cp -p "$backup" "$policy" && rm -f "$backup"
            else
                rm -f "$policy"
            fi
        }
        trap restore EXIT
        # exit status 101: "action forbidden by policy" (invoke-rc.d(8))
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod 755 "$policy"
        DEBIAN_FRONTEND=noninteractive apt-get -q -o Dpkg::Use-Pty=0 "$@"
    )
}

deb_version() {
    dpkg-parsechangelog -l "$ROOT/debian/changelog" -S "$1"
}
