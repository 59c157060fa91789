#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# A private 3-node MariaDB Galera cluster on loopback, for `make test-galera`.
#
#   scripts/galera.sh start|stop|status|env
#
# `start` keeps a cluster whose three nodes run and are Synced; otherwise
# it builds a fresh one: build/galera/node{1,2,3} each hold a data
# directory, socket, pid file and logs.  Each node is a MariaDB instance
# of scripts/services.sh (`services.sh mysql`, with the wsrep options);
# this script orders them into a cluster.  node1 bootstraps the cluster
# (--wsrep-new-cluster), node2 and node3 join it by SST (rsync).  Then the
# database idempotency, the user idem/idem-secret and mysql/schema.sql are
# created through node1 and replicated.  `start` returns once all three
# nodes report wsrep_cluster_size=3 and Synced.
#
# The system MariaDB (/var/lib/mysql, /etc/mysql, port 3306) and the
# default instances of scripts/services.sh (build/services) are never used:
# every server and client call passes --no-defaults and explicit paths.
#
#   node   client  galera  IST     SST
#   node1  13306   14567   14568   14444
#   node2  13307   14577   14578   14454
#   node3  13308   14587   14588   14464
#
# Environment (defaults in brackets):
#   IDEM_GALERA_DIR [build/galera]       IDEM_GALERA_PORT [13306] (node1's
#   client port; node2 and node3 take the next two)
#   IDEM_GALERA_TIMEOUT [90] seconds to wait for each step
#   IDEM_GALERA_RETRY_AUTOCOMMIT [0] wsrep_retry_autocommit: how often a
#     node retries an autocommit statement that lost a conflict before it
#     answers 1213.  MariaDB's default is 1; 0 here, so that every lost
#     race reaches the module.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SERVICES=$ROOT/scripts/services.sh
GDIR=${IDEM_GALERA_DIR:-$ROOT/build/galera}
case $GDIR in /*) ;; *) GDIR=$ROOT/$GDIR ;; esac

CLIENT_BASE=${IDEM_GALERA_PORT:-13306}
TIMEOUT=${IDEM_GALERA_TIMEOUT:-90}
RETRY_AUTOCOMMIT=${IDEM_GALERA_RETRY_AUTOCOMMIT:-0}
NODES=(1 2 3)

MYSQL_DB=idempotency
MYSQL_USER=idem
MYSQL_PASSWORD=idem-secret
CLUSTER_NAME=idem-galera-test

# packages this script needs beyond scripts/deps.sh (mariadb-server
# depends on them, but a partial installation may lack them)
PACKAGES=(galera-4 rsync mariadb-server mariadb-client iproute2)

die() { echo "galera: $*" >&2; exit 1; }

client_port() { echo $((CLIENT_BASE + $1 - 1)); }
galera_port() { echo $((14567 + ($1 - 1) * 10)); }
ist_port()    { echo $((14568 + ($1 - 1) * 10)); }
sst_port()    { echo $((14444 + ($1 - 1) * 10)); }

ndir()  { echo "$GDIR/node$1"; }
ndata() { echo "$GDIR/node$1/data"; }
nsock() { echo "$GDIR/node$1/mysql.sock"; }
nlog()  { echo "$GDIR/node$1/mysql.log"; }

# node, services.sh mysql COMMAND, more arguments: on the node's instance
# (data, socket, pid file and log in the default places under its directory)
node_svc() {
    local n=$1 cmd=$2
    shift 2
    "$SERVICES" mysql "$cmd" "$(ndir "$n")" --name "node$n" \
        --port "$(client_port "$n")" --timeout "$TIMEOUT" "$@" 9>&-
}

cluster_address() {
    local n a=""
    for n in "${NODES[@]}"; do
        a="$a${a:+,}127.0.0.1:$(galera_port "$n")"
    done
    echo "gcomm://$a"
}

# --------------------------------------------------------------- packages

missing_packages() {
    local p st
    for p in "${PACKAGES[@]}"; do
        st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
        case $st in ii*) ;; *) echo "$p" ;; esac
    done
}

# Same policy as scripts/deps.sh: a policy-rc.d that forbids every action
# while apt installs, so that no package starts a service.
install_packages() {
    local todo sudo="" policy=/usr/sbin/policy-rc.d backup="" rc=0
    command -v dpkg-query >/dev/null 2>&1 || return 0
    mapfile -t todo < <(missing_packages)
    [ ${#todo[@]} -eq 0 ] && return 0

    echo "galera: installing ${todo[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 \
            || die "need root (or sudo) to install: ${todo[*]}"
        sudo=sudo
    fi
    if [ -e "$policy" ]; then
        backup=$(mktemp /tmp/policy-rc.d.XXXXXX)
        $sudo cp -p "$policy" "$backup"
    fi
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"

    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq || rc=$?
    if [ $rc -eq 0 ]; then
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends -o Dpkg::Use-Pty=0 "${todo[@]}" || rc=$?
    fi

    if [ -n "$backup" ]; then
        $sudo cp -p "$backup" "$policy"
        $sudo rm -f "$backup"
    else
        $sudo rm -f "$policy"
    fi
    [ $rc -eq 0 ] || die "apt-get failed (exit $rc) installing ${todo[*]}"
}

# ------------------------------------------------------------------ tools

find_bin() {
    local b
    for b in "$@"; do
        if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
        if [ -x "/usr/sbin/$b" ]; then echo "/usr/sbin/$b"; return 0; fi
    done
    return 1
}

need_client_bins() {
    MYSQL=$(find_bin mariadb mysql) || die "mariadb client not found"
}

need_bins() {
    need_client_bins
    PROVIDER=""
    local p
    for p in /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so \
             /usr/lib/galera-4/libgalera_smm.so \
             /usr/lib/x86_64-linux-gnu/galera/libgalera_smm.so \
             /usr/lib64/galera-4/libgalera_smm.so; do
        if [ -f "$p" ]; then PROVIDER=$p; break; fi
    done
    [ -n "$PROVIDER" ] || PROVIDER=$(dpkg -L galera-4 2>/dev/null \
        | grep '/libgalera_smm\.so$' | head -n 1) || true
    [ -n "$PROVIDER" ] || die "libgalera_smm.so not found (package galera-4)"
    command -v rsync >/dev/null 2>&1 \
        || die "rsync not found (needed by the SST; package rsync)"
}

node_pid() {        # node -> pid of its live, answering mariadbd
    local out
    out=$(node_svc "$1" status 2>/dev/null) || return 1
    [[ $out =~ \(pid\ ([0-9]+) ]] || return 1
    echo "${BASH_REMATCH[1]}"
}

log_tail() {
    echo "---- last lines of $1 ----" >&2
    tail -n "${2:-30}" "$1" >&2 2>/dev/null || echo "(no log)" >&2
    echo "----" >&2
}

root_sql() {        # node, mariadb client arguments (root over the socket)
    local n=$1
    shift
    "$MYSQL" --no-defaults --protocol=socket --socket="$(nsock "$n")" \
        -uroot --connect-timeout=5 "$@"
}

wsrep_var() {       # node, status variable -> value
    root_sql "$1" -N -B -e "SHOW GLOBAL STATUS LIKE '$2'" 2>/dev/null \
        | cut -f2
}

node_synced() {
    [ "$(wsrep_var "$1" wsrep_cluster_size)" = 3 ] \
        && [ "$(wsrep_var "$1" wsrep_local_state_comment)" = Synced ] \
        && [ "$(wsrep_var "$1" wsrep_ready)" = ON ]
}

cluster_synced() {
    local n
    for n in "${NODES[@]}"; do
        node_pid "$n" >/dev/null && node_synced "$n" || return 1
    done
}

port_busy() {
    ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

# ------------------------------------------------------------------ nodes

# node [--no-init], [-- extra mariadbd options]: starts it and waits
# until it answers (a joiner: once its SST is complete)
start_node() {
    local n=$1 gp ip sp cp p opts init=()
    shift
    if [ "${1:-}" = --no-init ]; then init=(--no-init); shift; fi
    [ "${1:-}" != -- ] || shift
    cp=$(client_port "$n")
    gp=$(galera_port "$n")
    ip=$(ist_port "$n")
    sp=$(sst_port "$n")

    for p in "$cp" "$gp" "$ip" "$sp"; do
        port_busy "$p" && die "node$n: port $p is in use by another process"
    done

    opts="gmcast.listen_addr=tcp://127.0.0.1:$gp"
    opts="$opts;ist.recv_addr=127.0.0.1:$ip"
    opts="$opts;gcache.size=64M;gcache.dir=$(ndir "$n")"

    node_svc "$n" start --no-provision ${init[@]+"${init[@]}"} -- \
        --innodb-buffer-pool-size=48M --innodb-log-file-size=16M \
        --innodb-autoinc-lock-mode=2 --binlog-format=ROW \
        --default-storage-engine=InnoDB \
        --max-connections=400 \
        --wsrep-on=ON --wsrep-provider="$PROVIDER" \
        --wsrep-cluster-name="$CLUSTER_NAME" \
        --wsrep-cluster-address="$(cluster_address)" \
        --wsrep-node-name="node$n" \
        --wsrep-node-address="127.0.0.1:$gp" \
        --wsrep-node-incoming-address="127.0.0.1:$cp" \
        --wsrep-sst-method=rsync \
        --wsrep-sst-receive-address="127.0.0.1:$sp" \
        --wsrep-provider-options="$opts" \
        --wsrep-slave-threads=2 \
        --wsrep-retry-autocommit="$RETRY_AUTOCOMMIT" \
        "$@" >/dev/null
}

# Waits until node $1 is Synced in a cluster of $2 nodes.
wait_node() {
    local n=$1 size=$2 secs=$TIMEOUT end
    end=$((SECONDS + secs))
    while [ $SECONDS -lt $end ]; do
        node_pid "$n" >/dev/null \
            || { log_tail "$(nlog "$n")" 40; die "node$n: mariadbd is gone (log $(nlog "$n"))"; }
        if [ "$(wsrep_var "$n" wsrep_local_state_comment)" = Synced ] \
            && [ "$(wsrep_var "$n" wsrep_cluster_size)" -ge "$size" ] \
                   2>/dev/null
        then
            return 0
        fi
        sleep 0.2
    done
    log_tail "$(nlog "$n")" 40
    die "node$n: not Synced in a cluster of $size after ${secs}s" \
        "(state '$(wsrep_var "$n" wsrep_local_state_comment)'," \
        "size '$(wsrep_var "$n" wsrep_cluster_size)')"
}

stop_node() {
    local out
    out=$(node_svc "$1" stop) || die "node$1: did not stop"
    case $out in *"stopped (pid"*) echo "galera: $out" ;; esac
}

# the database, the account and mysql/schema.sql through node1
# (services.sh mysql provision), then on every node once replicated
provision() {
    node_svc 1 provision --user "$MYSQL_USER" --password "$MYSQL_PASSWORD" \
        --database "$MYSQL_DB" >/dev/null || return 1

    # DDL and users replicate as TOI: every node has them once it answers
    local n ok end
    for n in "${NODES[@]}"; do
        root_sql "$n" -e "SET GLOBAL wsrep_retry_autocommit =
                          $RETRY_AUTOCOMMIT" || return 1
        ok=0
        end=$((SECONDS + TIMEOUT))
        while [ $SECONDS -lt $end ]; do
            if [ "$(root_sql "$n" -N -B -e "SELECT COUNT(*) FROM
                    information_schema.tables WHERE table_schema =
                    '$MYSQL_DB' AND table_name = 'idempotency_keys'" \
                    2>/dev/null)" = 1 ]; then
                ok=1
                break
            fi
            sleep 0.2
        done
        [ $ok = 1 ] || die "node$n: table $MYSQL_DB.idempotency_keys not" \
                           "replicated after ${TIMEOUT}s"
    done
}

galera_start() {
    local n t0=$SECONDS
    install_packages
    need_bins

    if cluster_synced; then
        provision || die "provisioning through node1 failed"
        echo "galera: running, 3 nodes Synced (client ports" \
             "$(client_port 1) $(client_port 2) $(client_port 3))"
        return 0
    fi

    # a cluster that is not whole is rebuilt from scratch
    for n in 3 2 1; do stop_node "$n"; done
    rm -rf "$GDIR"/node1 "$GDIR"/node2 "$GDIR"/node3
    for n in "${NODES[@]}"; do
        mkdir -p "$(ndata "$n")"
        [ "$(nsock "$n" | wc -c)" -lt 107 ] \
            || die "$(nsock "$n"): too long for a unix socket path" \
                   "(set IDEM_GALERA_DIR to a shorter directory)"
    done

    echo "galera: bootstrapping node1 (a new data directory," \
         "wsrep-new-cluster, 127.0.0.1:$(client_port 1))"
    start_node 1 -- --wsrep-new-cluster
    wait_node 1 1

    # joiners receive node1's data by SST: they start with an empty
    # data directory; one at a time, since node1 is the donor for both.
    # Run by root, the joiner's rsync daemon works as "nobody" (rsyncd's
    # default uid) once it has entered the directory: the directory must
    # be nobody's (a throw-away test cluster; mariadbd runs as root).
    for n in 2 3; do
        if [ "$(id -u)" -eq 0 ]; then
            chown nobody: "$(ndata "$n")" 2>/dev/null \
                || chown 65534:65534 "$(ndata "$n")"
        fi
        echo "galera: node$n joining (127.0.0.1:$(client_port "$n")," \
             "SST rsync)"
        start_node "$n" --no-init
        wait_node "$n" "$n"
    done

    for n in "${NODES[@]}"; do
        local ok=0 end=$((SECONDS + TIMEOUT))
        while [ $SECONDS -lt $end ]; do
            if node_synced "$n"; then ok=1; break; fi
            sleep 0.2
        done
        if [ $ok != 1 ]; then
            log_tail "$(nlog "$n")" 40
            die "node$n: wsrep_cluster_size=3 and Synced not reached" \
                "after ${TIMEOUT}s"
        fi
    done

    if ! provision; then
        log_tail "$(nlog 1)"
        die "provisioning through node1 failed"
    fi
    echo "galera: started, 3 nodes Synced in $((SECONDS - t0))s" \
         "(client ports $(client_port 1) $(client_port 2) $(client_port 3)," \
         "user $MYSQL_USER, db $MYSQL_DB)"
}

galera_stop() {
    local n
    need_client_bins
    # the last node to stop is the one a restart would bootstrap from; the
    # data is rebuilt at the next start anyway
    for n in 3 2 1; do stop_node "$n"; done
    echo "galera: stopped"
}

galera_status() {
    local n pid rc=0
    need_client_bins
    for n in "${NODES[@]}"; do
        if pid=$(node_pid "$n"); then
            echo "galera: node$n running (pid $pid," \
                 "127.0.0.1:$(client_port "$n")," \
                 "cluster size $(wsrep_var "$n" wsrep_cluster_size)," \
                 "$(wsrep_var "$n" wsrep_local_state_comment))"
        else
            echo "galera: node$n stopped"
            rc=1
        fi
    done
    return $rc
}

print_env() {
    cat <<EOF
IDEM_GALERA_HOST=127.0.0.1
IDEM_GALERA_PORTS="$(client_port 1) $(client_port 2) $(client_port 3)"
IDEM_GALERA_SOCKETS="$(nsock 1) $(nsock 2) $(nsock 3)"
IDEM_GALERA_USER=$MYSQL_USER
IDEM_GALERA_PASSWORD=$MYSQL_PASSWORD
IDEM_GALERA_DB=$MYSQL_DB
EOF
}

lock() {
    mkdir -p "$GDIR"
    exec 9>"$GDIR/.lock"
    if ! flock -n 9; then
        echo "galera: waiting for another galera.sh in this checkout..." >&2
        flock 9
    fi
}

cmd=${1:-status}
case $cmd in
    start)  lock; galera_start ;;
    stop)   lock; galera_stop ;;
    status) galera_status ;;
    env)    print_env ;;
    *)      echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
