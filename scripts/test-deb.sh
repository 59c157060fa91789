#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Try the Debian package in the system's nginx (make test-deb).
#
#   scripts/test-deb.sh [PACKAGE.deb]   [build/deb/<package>_<version>_<arch>.deb]
#
#  1. apt-get installs the .deb (no service is started meanwhile) and the
#     checks: the module in /usr/lib/nginx/modules, mod-http-idempotency.conf
#     enabled in /etc/nginx/modules-enabled, the schema in /usr/share/;
#  2. `nginx -t` on the system's /etc/nginx/nginx.conf;
#  3. /usr/sbin/nginx on a free loopback port with a private configuration
#     that loads the modules through `include /etc/nginx/modules-enabled/*.conf`,
#     a backend (scripts/services.sh backend) behind it, the private MariaDB of
#     scripts/services.sh (make services) as the store: a POST with an
#     Idempotency-Key runs once at the backend, the second is replayed;
#  4. nginx and the backend stopped, `apt-get purge`, and the checks that the
#     symlink and the files are gone.
#
# The system is left as it was found: whatever happens, the exit trap stops
# what the script started, purges the package and removes the directories
# that nginx created in /var/lib/nginx.  A package already installed is not
# touched (the script refuses to run).  The private services are used, never
# stopped.  Runs under the lock of scripts/deb-common.sh.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEB_WHO=test-deb
. "$ROOT/scripts/deb-common.sh"

deb_lock "$0" "$@"

NGINX=/usr/sbin/nginx
ENABLED_DIR=/etc/nginx/modules-enabled
CONF_NAME=mod-http-idempotency.conf
LINK=$ENABLED_DIR/50-$CONF_NAME
AVAILABLE=/usr/share/nginx/modules-available/$CONF_NAME
SO=/usr/lib/nginx/modules/ngx_http_idempotency_module.so
SHARE=/usr/share/$DEB_PACKAGE
MYSQL_PORT=${IDEM_MYSQL_PORT:-3307}

die() { deb_die "$*"; }
ok() { echo "test-deb: ok: $*"; }
PASS=0
FAIL=0
check() {       # check DESCRIPTION COMMAND...: counted, never fatal
    local what=$1
    shift
    if "$@"; then
        PASS=$((PASS + 1))
        ok "$what"
    else
        FAIL=$((FAIL + 1))
        echo "test-deb: FAILED: $what" >&2
    fi
}

[ "$(id -u)" -eq 0 ] || die "run as root (apt-get install/purge)"
[ -x "$NGINX" ] || die "$NGINX not found (make deps)"
command -v curl >/dev/null 2>&1 || die "curl not found (make deps)"

if [ $# -ge 1 ]; then
    DEB=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
    DEB=$ROOT/build/deb/${DEB_PACKAGE}_$(deb_version Version)_$(dpkg-architecture -qDEB_HOST_ARCH).deb
fi
[ -f "$DEB" ] || die "$DEB not found (make deb)"

status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$DEB_PACKAGE" 2>/dev/null || true)
case $status in
    ""|un*|pn*) ;;
    *) die "$DEB_PACKAGE is already on this system (dpkg status '${status% }'):
  test-deb installs and purges it; remove it first (apt-get purge $DEB_PACKAGE)" ;;
esac
[ ! -e "$LINK" ] && [ ! -L "$LINK" ] || die "$LINK exists already"

# the private MariaDB must answer (make services starts it, make test-deb
# depends on it)
(exec 3<>"/dev/tcp/127.0.0.1/$MYSQL_PORT") 2>/dev/null \
    || die "the private MariaDB (127.0.0.1:$MYSQL_PORT) is not running (make services)"

# ------------------------------------------------------- state and cleanup

WORK=$(mktemp -d /tmp/idem-test-deb.XXXXXX)
chmod 755 "$WORK"       # nginx's workers (nobody) use its temp dirs
INSTALLED=
LIB_NGINX=/var/lib/nginx
LIB_BEFORE=$(ls -A "$LIB_NGINX" 2>/dev/null || true)
ENABLED_BEFORE=$(ls -A "$ENABLED_DIR")
CONFD_BEFORE=$(ls -A /etc/nginx/conf.d)

stop_nginx() {
    local pid i
    [ -s "$WORK/nginx.pid" ] || return 0
    pid=$(tr -dc '0-9' < "$WORK/nginx.pid")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill -QUIT "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$WORK/nginx.pid"
}

purge() {
    deb_apt purge -y "$DEB_PACKAGE" > "$WORK/purge.log" 2>&1 \
        || { cat "$WORK/purge.log" >&2; return 1; }
    INSTALLED=
}

cleanup() {
    local rc=$? d
    trap - EXIT INT TERM
    stop_nginx
    "$ROOT/scripts/services.sh" backend stop "$WORK/backend.pid" -q || true
    if [ -n "$INSTALLED" ]; then
        echo "test-deb: purging $DEB_PACKAGE" >&2
        purge || rc=1
    fi
    # the temp directories that `nginx -t` made in /var/lib/nginx
    for d in body fastcgi proxy scgi uwsgi; do
        if [ -d "$LIB_NGINX/$d" ] && ! grep -qx "$d" <<< "$LIB_BEFORE"; then
            rmdir "$LIB_NGINX/$d" 2>/dev/null || true
        fi
    done
    if [ $rc -ne 0 ] && [ -f "$WORK/error.log" ]; then
        echo "---- last lines of the test nginx's error.log ----" >&2
        tail -n 20 "$WORK/error.log" >&2
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# ------------------------------------------------------------------ install

echo "test-deb: installing $(basename "$DEB")"
INSTALLED=1     # from here on the trap purges (a failed install too)
if ! deb_apt install -y --no-install-recommends "$DEB" > "$WORK/install.log" 2>&1; then
    cat "$WORK/install.log" >&2
    die "apt-get install failed"
fi

check "installed: $(dpkg-query -W -f='${Package} ${Version}' "$DEB_PACKAGE")" \
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$DEB_PACKAGE")" = "ii " ]
check "$SO" [ -f "$SO" ]
check "$AVAILABLE loads it" \
    grep -qx 'load_module modules/ngx_http_idempotency_module.so;' "$AVAILABLE"
check "enabled: $LINK -> $(readlink "$LINK" 2>/dev/null)" \
    [ "$(readlink "$LINK" 2>/dev/null)" = "$AVAILABLE" ]
for sql in schema purge_event fence upgrade-expiry-order; do
    check "schema: $SHARE/$sql.sql" [ -s "$SHARE/$sql.sql" ]
done
depends=$(dpkg-query -W -f='${Depends}' "$DEB_PACKAGE")
for dep in nginx-abi- libmariadb3 libhiredis0.14 libyajl2 libssl3; do
    check "Depends: $dep" grep -q "$dep" <<< "$depends"
done

echo "test-deb: nginx -t (/etc/nginx/nginx.conf)"
check "nginx -t on the system's configuration" "$NGINX" -t -q

# ----------------------------------------------------- claim and replay

NGINX_PORT=$(free_port)
BACKEND_PORT=$(free_port)
while [ "$BACKEND_PORT" = "$NGINX_PORT" ]; do BACKEND_PORT=$(free_port); done

"$ROOT/scripts/services.sh" backend restart "$BACKEND_PORT" "$WORK/backend.pid" \
    "$WORK/backend.log"

cat > "$WORK/nginx.conf" <<EOF
# make test-deb: the system's nginx and the modules it enables
include $ENABLED_DIR/*.conf;

# the workers as the master (root): the temp paths are in the checkout,
# which other users may not be able to enter
user root;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/error.log info;

events {
    worker_connections 64;
}

http {
    access_log $WORK/access.log;
    client_body_temp_path $WORK/client_body_temp;
    proxy_temp_path       $WORK/proxy_temp;
    fastcgi_temp_path     $WORK/fastcgi_temp;
    uwsgi_temp_path       $WORK/uwsgi_temp;
    scgi_temp_path        $WORK/scgi_temp;

    idempotency_store deb mysql=127.0.0.1:$MYSQL_PORT user=idem password=idem-secret database=idempotency;

    server {
        listen 127.0.0.1:$NGINX_PORT;

        location /orders {
            idempotency deb;
            idempotency_required on;
            proxy_pass http://127.0.0.1:$BACKEND_PORT;
        }
    }
}
EOF

check "nginx -t on the test configuration" \
    "$NGINX" -c "$WORK/nginx.conf" -e "$WORK/error.log" -t -q
"$NGINX" -c "$WORK/nginx.conf" -e "$WORK/error.log" \
    || die "$NGINX did not start"
for ((i = 0; i < 50; i++)); do
    curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$NGINX_PORT/" && break
    sleep 0.1
done
echo "test-deb: $NGINX on 127.0.0.1:$NGINX_PORT, backend 127.0.0.1:$BACKEND_PORT," \
     "store 127.0.0.1:$MYSQL_PORT"

KEY="test-deb-$$-$(date +%s%N)"
post() {    # post N: POST /orders with $KEY into $WORK/hN, $WORK/bN
    curl -sS --max-time 20 -o "$WORK/b$1" -D "$WORK/h$1" \
        -X POST "http://127.0.0.1:$NGINX_PORT/orders" \
        -H "Idempotency-Key: $KEY" -H 'Content-Type: application/json' \
        --data '{"item":"deb"}'
}
status_of() { head -n 1 "$WORK/h$1" | cut -d' ' -f2; }
replayed() { grep -qi '^Idempotent-Replayed: *true' "$WORK/h$1"; }
count() {
    curl -sS --max-time 5 "http://127.0.0.1:$BACKEND_PORT/__count?key=$KEY"
}

post 1 || die "the first POST failed"
check "first POST executed: $(status_of 1), $(tr -d '\n' < "$WORK/b1")" \
    [ "$(status_of 1)" = 201 ]
check "first POST not replayed" eval '! replayed 1'
check "backend count 1 after the first POST" [ "$(count)" = 1 ]

post 2 || die "the second POST failed"
check "second POST: $(status_of 2), Idempotent-Replayed: true" \
    eval '[ "$(status_of 2)" = 201 ] && replayed 2'
check "second POST: the same body" cmp -s "$WORK/b1" "$WORK/b2"
check "backend count still 1 after the replay" [ "$(count)" = 1 ]

stop_nginx
check "no emerg/alert/crit in the test nginx's error.log" \
    eval '! grep -E "\[(emerg|alert|crit)\]" "$WORK/error.log"'
"$ROOT/scripts/services.sh" backend stop "$WORK/backend.pid" -q

# -------------------------------------------------------------------- purge

echo "test-deb: apt-get purge -y $DEB_PACKAGE"
purge || die "apt-get purge failed"
check "purged: dpkg knows no $DEB_PACKAGE" \
    eval '! dpkg-query -W -f="\${db:Status-Abbrev}" "$DEB_PACKAGE" 2>/dev/null | grep -q "^[irhuf]"'
check "symlink gone: $LINK" eval '[ ! -e "$LINK" ] && [ ! -L "$LINK" ] && [ ! -L "$LINK.removed" ]'
check "files gone: $SO, $AVAILABLE, $SHARE" \
    eval '[ ! -e "$SO" ] && [ ! -e "$AVAILABLE" ] && [ ! -e "$SHARE" ]'
check "/etc/nginx/modules-enabled as before" \
    [ "$(ls -A "$ENABLED_DIR")" = "$ENABLED_BEFORE" ]
check "/etc/nginx/conf.d as before" \
    [ "$(ls -A /etc/nginx/conf.d)" = "$CONFD_BEFORE" ]

echo "test-deb: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
