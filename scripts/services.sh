#!/usr/bin/env bash
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# Every private service of development, tests and the demo: MariaDB and
# Redis instances, PHP-FPM and uWSGI with the apps of backend/, and the
# test backend.  The one place that runs mariadbd, mariadb-install-db,
# redis-server, php-fpm, uwsgi and backend/app.py;
# scripts/galera.sh (the Galera nodes), t/stress/IdemStress.pm (the fault
# MariaDB of the stress tests) and t/TierTest.pm (the Redis a test stops
# and hangs) start theirs through it.
#
#   scripts/services.sh start|stop|restart|status|reset|env
#
# The default set, under build/services/: the suite's and the demo's
# MariaDB (mysql, 127.0.0.1:3307, build/services/mysql.sock), a second,
# independent one for the shard tests (mysql2, :3308, build/services/shard2,
# build/services/mysql2.sock), a Redis (redis, :6380,
# build/services/redis.sock), a PHP-FPM master running backend/app.php
# (php-fpm, :8094, and a second pool with request_terminate_timeout 2s on
# build/services/php-fpm-term.sock) and a uWSGI master running
# backend/wsgi.py (uwsgi, :8095, and FastCGI on
# build/services/uwsgi/sock/fcgi.sock).  reset empties the table, Redis and the
# apps' execution counts; env prints the connection settings as shell
# assignments.
#
#   scripts/services.sh start|stop --started FILE
#
# start notes in FILE the servers of the default set that it started,
# not those that were running; stop stops only the servers FILE names
# (`make test` stops what it started, and leaves what was running).
#
#   scripts/services.sh php-fpm|uwsgi start|stop|status|reset
#
# One of the two application servers of the default set.  Each has its
# own configuration, written by start into build/services/php-fpm/ or
# build/services/uwsgi/ (never the system's pools or ini files), its log
# there (php-fpm.log, uwsgi.log), and its app's execution counts in
# counts/ there (a file per key, shared by the server's processes);
# reset empties counts/.  start restarts a server whose configuration
# changed (another port).
#
#   scripts/services.sh mysql start|stop|status|provision|reset DIR [OPTION...] [-- MARIADBD-OPTION...]
#
# One MariaDB instance: data in DIR/data, pid file DIR/mysql.pid, log
# DIR/mysql.log, socket DIR/mysql.sock.  start initializes the data
# directory when it is new, starts mariadbd (options after -- are added
# to its command line, after and so over the built-in ones, e.g. Galera's
# wsrep options or TLS), waits until it answers, and provisions it: the
# database, the account with SELECT, INSERT, UPDATE, DELETE on it, and
# mysql/schema.sql.  A server already running is kept (and provisioned).
# Options:
#   --port PORT          client port on 127.0.0.1 (start)
#   --name NAME          in messages [basename of DIR]
#   --data DIR2          the data directory [DIR/data]
#   --socket PATH        the unix socket [DIR/mysql.sock]
#   --user U --password P --database D   the account and database
#                        [idem idem-secret idempotency]
#   --timeout SECS       how long start waits for an answer [60]
#   --no-init            do not initialize an empty data directory (a
#                        Galera joiner receives its data by SST)
#   --no-provision       start only; provision later
#   --fresh              provision drops the table and creates it anew
#
#   scripts/services.sh redis start|stop|status|reset DIR [OPTION...] [-- REDIS-SERVER-OPTION...]
#
# One Redis instance without persistence: pid file DIR/redis.pid, log
# DIR/redis.log.  Options: --port PORT, --socket PATH (also listen
# there), --name NAME.  A --requirepass among the server options is used
# to talk to it.
#
# start prints "NAME: started (pid PID, ...)" or "NAME: running (pid PID,
# ...)": the server's own pid (a caller may SIGSTOP, SIGCONT or SIGKILL
# it).  stop takes SIGCONT first, so a frozen server stops too.
#
#   scripts/services.sh backend start|restart PORT PIDFILE LOGFILE
#   scripts/services.sh backend stop|status PIDFILE [-q]
#
# The demo/test backend (backend/app.py) in the background.  start reuses
# a running one, restart always starts a fresh one.
#
#   scripts/services.sh grpc start|restart PORT PIDFILE LOGFILE
#   scripts/services.sh grpc stop|status PIDFILE [-q]
#
# The gRPC test backend (t/tools/grpc-server.js, @grpc/grpc-js from
# scripts/node-deps.sh) on 127.0.0.1:PORT, in the background.
#
# The system instances (/var/lib/mysql, /etc/mysql, ports 3306/6379) are
# never used: every client and server call passes --no-defaults and
# explicit paths.
#
# Environment (defaults in brackets):
#   IDEM_MYSQL_PORT [3307]  IDEM_REDIS_PORT [6380]  IDEM_SERVICES_DIR [build/services]
#   IDEM_MYSQL2_PORT [3308] the second MariaDB; 0: none
#   IDEM_PHPFPM_PORT [8094] IDEM_UWSGI_PORT [8095]
#   IDEM_START_TIMEOUT [60] seconds to wait for a server to answer

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SVC=${IDEM_SERVICES_DIR:-$ROOT/build/services}
case $SVC in /*) ;; *) SVC=$ROOT/$SVC ;; esac

MYSQL1_PORT=${IDEM_MYSQL_PORT:-3307}
MYSQL2_PORT=${IDEM_MYSQL2_PORT:-3308}
REDIS1_PORT=${IDEM_REDIS_PORT:-6380}
PHPFPM_PORT=${IDEM_PHPFPM_PORT:-8094}
UWSGI_PORT=${IDEM_UWSGI_PORT:-8095}
START_TIMEOUT=${IDEM_START_TIMEOUT:-60}

SCHEMA=$ROOT/mysql/schema.sql
PYTHON=${PYTHON:-python3}

# the tuning of the default set's MariaDB servers.  The redo log, the
# buffer pool and the page cleaner are sized for `make bench`
# (bench/NOTES.md, "The tail"): a redo log that fills, or a buffer
# pool without free pages, makes InnoDB flush pages synchronously, and
# every write waits 40-250 ms for it.  With max_dirty_pages_pct_lwm at
# 0 (the default) MariaDB 10.11's page cleaner flushes nothing in the
# background, however old the checkpoint; at 10 it keeps flushing, at
# up to io_capacity pages a second.
DEFAULT_MYSQL_OPTS=(
    --innodb-buffer-pool-size=512M
    --innodb-log-file-size=1G
    --innodb-io-capacity=2000
    --innodb-io-capacity-max=4000
    --innodb-max-dirty-pages-pct-lwm=10
    --max-connections=500
    --thread-handling=pool-of-threads
    --innodb-spin-wait-delay=0
)

die() { echo "services: $*" >&2; exit 1; }

find_bin() {
    local b
    for b in "$@"; do
        if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
        if [ -x "/usr/sbin/$b" ]; then echo "/usr/sbin/$b"; return 0; fi
    done
    return 1
}

need_mysql_bins() {
    MARIADBD=$(find_bin mariadbd mysqld) \
        || die "mariadbd not found (run scripts/deps.sh: package mariadb-server)"
    INSTALL_DB=$(find_bin mariadb-install-db mysql_install_db) \
        || die "mariadb-install-db not found (package mariadb-server)"
    MYSQL=$(find_bin mariadb mysql) \
        || die "mariadb client not found (package mariadb-client)"
    MYADMIN=$(find_bin mariadb-admin mysqladmin) \
        || die "mariadb-admin not found (package mariadb-client)"
}

need_redis_bins() {
    REDIS_SERVER=$(find_bin redis-server) \
        || die "redis-server not found (run scripts/deps.sh: package redis-server)"
    REDIS_CLI=$(find_bin redis-cli) \
        || die "redis-cli not found (package redis-tools)"
}

# The unix socket path must fit in sun_path (108 bytes).
check_socket_path() {
    if [ ${#1} -ge 107 ]; then
        die "socket path too long for a unix socket (${#1} bytes): $1
  set IDEM_SERVICES_DIR (or the caller's directory) to a shorter one"
    fi
}

alive() {           # pid exists and is not a zombie waiting to be reaped
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# pidfile, program[, string its command line must contain] -> the pid on
# stdout if that process is alive (a guard against pid reuse)
pid_of() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(tr -dc '0-9' < "$1")
    [ -n "$pid" ] && alive "$pid" || return 1
    case $(cat "/proc/$pid/comm" 2>/dev/null) in
        $2*) ;;
        *) return 1 ;;
    esac
    if [ -n "${3:-}" ]; then
        tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$3" \
            || return 1
    fi
    echo "$pid"
}

# Dies when something else listens on the port a server is to take: a
# server that cannot bind fails with a message of its own, in its log,
# and is otherwise told apart from one that failed for another reason
# only with guesses.  $1 the port, $2 the server's name, $3 the variable
# that moves it.
port_free() {
    local who
    command -v ss >/dev/null 2>&1 || return 0
    who=$(ss -Htlnp "sport = :$1" 2>/dev/null | head -n 1) || return 0
    [ -n "$who" ] || return 0
    who=$(sed -n 's/.*users:((\("[^"]*",pid=[0-9]*\).*/\1/p' <<<"$who")
    die "$2: port $1 is in use${who:+ by $who}: stop that or set $3 to another port"
}

log_tail() {
    echo "---- last lines of $1 ----" >&2
    tail -n "${2:-25}" "$1" >&2 2>/dev/null || echo "(no log)" >&2
    echo "----" >&2
}

# Wait until a pid is gone; SIGKILL after $2 seconds.
wait_gone() {
    local pid=$1 secs=${2:-20} i
    for ((i = 0; i < secs * 10; i++)); do
        alive "$pid" || return 0
        sleep 0.1
    done
    echo "services: pid $pid still running after ${secs}s: SIGKILL" >&2
    kill -9 "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        alive "$pid" || return 0
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------- MariaDB

# An instance is described by MY_* variables: mysql_use N (the default
# set) or mysql_args DIR OPTION... (the command line) sets them.
mysql_defaults() {   # DIR
    MY_DIR=$1
    case $MY_DIR in /*) ;; *) MY_DIR=$PWD/$MY_DIR ;; esac
    MY_NAME=$(basename "$MY_DIR")
    MY_DATA=$MY_DIR/data
    MY_SOCK=$MY_DIR/mysql.sock
    MY_PORT=""
    MY_USER=idem MY_PASSWORD=idem-secret MY_DB=idempotency
    MY_TIMEOUT=$START_TIMEOUT MY_INIT=1 MY_PROVISION=1 MY_FRESH=0
    MY_OPTS=()
}

mysql_paths() {
    MY_PID=$MY_DIR/mysql.pid
    MY_LOG=$MY_DIR/mysql.log
}

# mysql_use N: instance 1 is the store of the suite and the demo;
# instance 2 is a second, independent server for the shard tests.
mysql_use() {
    if [ "$1" = 1 ]; then
        mysql_defaults "$SVC"
        MY_NAME=mysql MY_PORT=$MYSQL1_PORT
    else
        mysql_defaults "$SVC/shard2"
        MY_NAME=mysql2 MY_PORT=$MYSQL2_PORT
    fi
    MY_DATA=$MY_DIR/mysql-data
    MY_SOCK=$SVC/$MY_NAME.sock
    MY_OPTS=("${DEFAULT_MYSQL_OPTS[@]}")
    mysql_paths
}

mysql_args() {       # DIR OPTION... [-- MARIADBD-OPTION...]
    [ $# -ge 1 ] && [ -n "$1" ] || die "mysql: no instance directory"
    mysql_defaults "$1"
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            --port)     MY_PORT=${2:?--port needs a value}; shift 2 ;;
            --name)     MY_NAME=${2:?}; shift 2 ;;
            --data)     MY_DATA=${2:?}; shift 2 ;;
            --socket)   MY_SOCK=${2:?}; shift 2 ;;
            --user)     MY_USER=${2:?}; shift 2 ;;
            --password) MY_PASSWORD=${2:?}; shift 2 ;;
            --database) MY_DB=${2:?}; shift 2 ;;
            --timeout)  MY_TIMEOUT=${2:?}; shift 2 ;;
            --no-init)  MY_INIT=0; shift ;;
            --no-provision) MY_PROVISION=0; shift ;;
            --fresh)    MY_FRESH=1; shift ;;
            --)         shift; MY_OPTS=("$@"); break ;;
            *)          die "mysql: unknown option '$1'" ;;
        esac
    done
    case $MY_DATA in /*) ;; *) MY_DATA=$PWD/$MY_DATA ;; esac
    case $MY_SOCK in /*) ;; *) MY_SOCK=$PWD/$MY_SOCK ;; esac
    mysql_paths
}

mysql_each() {      # mysql_each FUNCTION: run it on every default instance
    local rc=0
    mysql_use 1; "$1" || rc=1
    if [ "$MYSQL2_PORT" != 0 ]; then
        mysql_use 2; "$1" || rc=1
    fi
    return $rc
}

my_root() {   # run the client as root over the private socket
    "$MYSQL" --no-defaults --protocol=socket --socket="$MY_SOCK" -uroot "$@"
}

my_ping() {
    "$MYADMIN" --no-defaults --protocol=socket --socket="$MY_SOCK" -uroot \
        --connect-timeout=2 ping >/dev/null 2>&1
}

my_pid() {          # the instance's live mariadbd
    pid_of "$MY_PID" mariadbd "--datadir=$MY_DATA" \
        || pid_of "$MY_PID" mysqld "--datadir=$MY_DATA"
}

mysql_running() {
    local pid
    pid=$(my_pid) || return 1
    my_ping || return 1
    echo "$pid"
}

mysql_provision() {
    # mariadb-install-db also creates root@<hostname>, which only
    # produces warnings under --skip-name-resolve
    if [ -f "$MY_DIR/mysql.fresh" ]; then
        my_root -N -e "SELECT CONCAT('DROP USER IF EXISTS ', QUOTE(user), '@', QUOTE(host), ';') FROM mysql.user WHERE host NOT IN ('localhost', '127.0.0.1', '::1', '%')" \
            | my_root && rm -f "$MY_DIR/mysql.fresh"
    fi
    my_root <<SQL || return 1
CREATE DATABASE IF NOT EXISTS \`$MY_DB\`;
CREATE USER IF NOT EXISTS '$MY_USER'@'localhost' IDENTIFIED BY '$MY_PASSWORD';
CREATE USER IF NOT EXISTS '$MY_USER'@'127.0.0.1' IDENTIFIED BY '$MY_PASSWORD';
ALTER USER '$MY_USER'@'localhost' IDENTIFIED BY '$MY_PASSWORD';
ALTER USER '$MY_USER'@'127.0.0.1' IDENTIFIED BY '$MY_PASSWORD';
REVOKE ALL PRIVILEGES, GRANT OPTION FROM '$MY_USER'@'localhost';
REVOKE ALL PRIVILEGES, GRANT OPTION FROM '$MY_USER'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON \`$MY_DB\`.* TO '$MY_USER'@'localhost';
GRANT SELECT, INSERT, UPDATE, DELETE ON \`$MY_DB\`.* TO '$MY_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
    mysql_schema
}

# Apply mysql/schema.sql.  Its checksum is remembered: when the schema file
# changes, the (development-only) table is dropped and created anew, since
# CREATE TABLE IF NOT EXISTS would silently keep the old definition.
# the tables of the keys, the fence's markers and the demo backend's
# withdrawals (t/048, demo): made anew when one of their files changed
SCHEMA_TABLES='idempotency_keys, idempotency_fence, withdrawals, accounts'

mysql_schema() {
    local sum old=""
    [ -f "$SCHEMA" ] || { echo "services: warning: $SCHEMA missing, no table created" >&2; return 0; }
    sum=$(cat "$SCHEMA" "$ROOT/mysql/fence.sql" "$ROOT/backend/withdraw.sql" \
          | sha256sum | cut -d' ' -f1)
    [ -f "$MY_DIR/schema.sha256" ] && old=$(cat "$MY_DIR/schema.sha256")
    if [ "$MY_FRESH" = 1 ]; then
        my_root "$MY_DB" -e "DROP TABLE IF EXISTS $SCHEMA_TABLES" || return 1
    elif [ -n "$old" ] && [ "$old" != "$sum" ]; then
        echo "$MY_NAME: mysql/schema.sql, mysql/fence.sql or backend/withdraw.sql changed: recreating their tables"
        my_root "$MY_DB" -e "DROP TABLE IF EXISTS $SCHEMA_TABLES" || return 1
    fi
    my_root "$MY_DB" < "$SCHEMA" || return 1
    cat "$ROOT/mysql/fence.sql" "$ROOT/backend/withdraw.sql" \
        | my_root "$MY_DB" || return 1
    echo "$sum" > "$MY_DIR/schema.sha256"
}

mysql_start() {
    local pid i
    need_mysql_bins
    [ -n "$MY_PORT" ] || die "$MY_NAME: no --port"
    check_socket_path "$MY_SOCK"
    mkdir -p "$MY_DIR"

    if pid=$(mysql_running); then
        if [ "$MY_PROVISION" = 1 ]; then
            mysql_provision || die "$MY_NAME: provisioning failed"
        fi
        echo "$MY_NAME: running (pid $pid, 127.0.0.1:$MY_PORT, socket $MY_SOCK)"
        return 0
    fi

    # A live server that does not answer yet (still starting, or hung).
    if pid=$(my_pid); then
        kill -CONT "$pid" 2>/dev/null || true
        for ((i = 0; i < MY_TIMEOUT * 10; i++)); do
            my_ping && break
            alive "$pid" || break
            sleep 0.1
        done
        if ! my_ping; then
            echo "$MY_NAME: pid $pid does not answer; killing it" >&2
            kill "$pid" 2>/dev/null || true
            wait_gone "$pid" 20 || die "$MY_NAME: cannot stop pid $pid"
        fi
    fi

    if ! pid=$(mysql_running); then
        # leftovers of a crashed or killed server
        rm -f "$MY_PID" "$MY_SOCK" "$MY_SOCK.lock"

        if [ "$MY_INIT" = 1 ] && [ ! -d "$MY_DATA/mysql" ]; then
            echo "$MY_NAME: initializing $MY_DATA"
            rm -rf "$MY_DATA" "$MY_DIR/schema.sha256" "$MY_DIR/mysql.fresh"
            mkdir -p "$MY_DATA"
            if ! "$INSTALL_DB" --no-defaults --datadir="$MY_DATA" \
                    --user="$(id -un)" --auth-root-authentication-method=normal \
                    --skip-test-db --skip-name-resolve \
                    >"$MY_DIR/mysql-install.log" 2>&1 9>&-; then
                log_tail "$MY_DIR/mysql-install.log"
                rm -rf "$MY_DATA"
                die "$MY_NAME: mariadb-install-db failed"
            fi
            touch "$MY_DIR/mysql.fresh"
        fi
        mkdir -p "$MY_DATA"

        port_free "$MY_PORT" "$MY_NAME" "the port (--port, IDEM_MYSQL_PORT or MYSQL_PORT)"
        : > "$MY_LOG.start"
        # setsid: not part of the caller's process group (make, CI job).
        # 9>&-: do not inherit the lock descriptor.
        setsid "$MARIADBD" --no-defaults --user="$(id -un)" \
            --datadir="$MY_DATA" --socket="$MY_SOCK" \
            --port="$MY_PORT" --bind-address=127.0.0.1 \
            --pid-file="$MY_PID" --log-error="$MY_LOG" \
            --skip-name-resolve --skip-log-bin \
            --innodb-flush-log-at-trx-commit=2 \
            --character-set-server=utf8mb4 \
            --default-time-zone=+00:00 \
            ${MY_OPTS[@]+"${MY_OPTS[@]}"} \
            </dev/null >>"$MY_LOG.start" 2>&1 9>&- &
        local spid=$!

        for ((i = 0; i < MY_TIMEOUT * 10; i++)); do
            if ! alive "$spid"; then
                log_tail "$MY_LOG" 40
                log_tail "$MY_LOG.start" 10
                die "$MY_NAME: mariadbd exited during startup (its log above says why)"
            fi
            my_ping && break
            sleep 0.1
        done
        if ! my_ping; then
            log_tail "$MY_LOG" 40
            die "$MY_NAME: no answer on $MY_SOCK after ${MY_TIMEOUT}s (pid $spid still running)"
        fi
        # the pid file is written by mariadbd itself; make sure it is there
        [ -s "$MY_PID" ] || echo "$spid" > "$MY_PID"
        pid=$spid
    fi

    if [ "$MY_PROVISION" = 1 ]; then
        mysql_provision || { log_tail "$MY_LOG"; die "$MY_NAME: provisioning failed"; }
    fi
    echo "$MY_NAME: started (pid $pid, 127.0.0.1:$MY_PORT, socket $MY_SOCK)"
    note_started "$MY_NAME"
}

mysql_stop() {
    local pid
    need_mysql_bins
    if pid=$(my_pid); then
        kill -CONT "$pid" 2>/dev/null || true
        "$MYADMIN" --no-defaults --protocol=socket --socket="$MY_SOCK" -uroot \
            --connect-timeout=2 shutdown >/dev/null 2>&1 \
            || kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 60 || die "$MY_NAME: pid $pid did not stop"
        echo "$MY_NAME: stopped (pid $pid)"
    else
        echo "$MY_NAME: not running"
    fi
    rm -f "$MY_PID" "$MY_SOCK" "$MY_SOCK.lock"
}

mysql_status() {
    local pid
    need_mysql_bins
    if pid=$(mysql_running); then
        echo "$MY_NAME: running (pid $pid, 127.0.0.1:${MY_PORT:-?}, socket $MY_SOCK, user $MY_USER/$MY_PASSWORD, db $MY_DB)"
        return 0
    elif pid=$(my_pid); then
        echo "$MY_NAME: pid $pid alive but not answering on $MY_SOCK"
    else
        echo "$MY_NAME: stopped"
    fi
    return 1
}

mysql_reset() {
    need_mysql_bins
    mysql_running >/dev/null || die "$MY_NAME: not running (scripts/services.sh start)"
    my_root "$MY_DB" -e 'TRUNCATE TABLE idempotency_keys' \
        || die "$MY_NAME: TRUNCATE failed"
    # a marker of an earlier run would find the same keys executed; the
    # demo's withdrawals start again from alice's 1000 (backend/withdraw.sql)
    my_root "$MY_DB" -e "TRUNCATE TABLE idempotency_fence;
        TRUNCATE TABLE withdrawals;
        UPDATE accounts SET balance = 1000 WHERE id = 'alice'" 2>/dev/null || true
    echo "$MY_NAME: table idempotency_keys truncated"
}

mysql_provision_cmd() {
    need_mysql_bins
    mysql_running >/dev/null || die "$MY_NAME: not running"
    mysql_provision || die "$MY_NAME: provisioning failed"
    echo "$MY_NAME: provisioned (user $MY_USER, db $MY_DB)"
}

# ------------------------------------------------------------------ Redis

# RD_* variables: redis_use (the default set) or redis_args DIR OPTION...
redis_defaults() {   # DIR
    RD_DIR=$1
    case $RD_DIR in /*) ;; *) RD_DIR=$PWD/$RD_DIR ;; esac
    RD_NAME=$(basename "$RD_DIR")
    RD_PORT="" RD_SOCK="" RD_PASS=""
    RD_OPTS=()
    RD_PID=$RD_DIR/redis.pid
    RD_LOG=$RD_DIR/redis.log
}

redis_use() {
    redis_defaults "$SVC"
    RD_NAME=redis RD_PORT=$REDIS1_PORT RD_SOCK=$SVC/redis.sock
}

redis_args() {       # DIR OPTION... [-- REDIS-SERVER-OPTION...]
    [ $# -ge 1 ] && [ -n "$1" ] || die "redis: no instance directory"
    redis_defaults "$1"
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            --port)   RD_PORT=${2:?--port needs a value}; shift 2 ;;
            --socket) RD_SOCK=${2:?}; shift 2 ;;
            --name)   RD_NAME=${2:?}; shift 2 ;;
            --)       shift; RD_OPTS=("$@"); break ;;
            *)        die "redis: unknown option '$1'" ;;
        esac
    done
    case $RD_SOCK in ''|/*) ;; *) RD_SOCK=$PWD/$RD_SOCK ;; esac
    local i
    for ((i = 0; i + 1 < ${#RD_OPTS[@]}; i++)); do
        [ "${RD_OPTS[i]}" = --requirepass ] && RD_PASS=${RD_OPTS[i + 1]}
    done
    return 0
}

rd_cli() {
    local auth=()
    [ -z "$RD_PASS" ] || auth=(env REDISCLI_AUTH="$RD_PASS")
    if [ -n "$RD_SOCK" ]; then
        ${auth[@]+"${auth[@]}"} "$REDIS_CLI" -s "$RD_SOCK" "$@"
    else
        ${auth[@]+"${auth[@]}"} "$REDIS_CLI" -h 127.0.0.1 -p "$RD_PORT" "$@"
    fi
}

rd_where() {
    echo "127.0.0.1:$RD_PORT${RD_SOCK:+, socket $RD_SOCK}"
}

redis_running() {
    local pid
    pid=$(pid_of "$RD_PID" redis-server) || return 1
    [ "$(rd_cli ping 2>/dev/null)" = PONG ] || return 1
    echo "$pid"
}

redis_start() {
    local pid i
    need_redis_bins
    [ -n "$RD_PORT" ] || die "$RD_NAME: no --port"
    [ -z "$RD_SOCK" ] || check_socket_path "$RD_SOCK"
    mkdir -p "$RD_DIR"
    if pid=$(redis_running); then
        echo "$RD_NAME: running (pid $pid, $(rd_where))"
        return 0
    fi
    if pid=$(pid_of "$RD_PID" redis-server); then
        echo "$RD_NAME: pid $pid does not answer; killing it" >&2
        kill -CONT "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "$RD_NAME: cannot stop pid $pid"
    fi
    rm -f "$RD_PID"
    [ -z "$RD_SOCK" ] || rm -f "$RD_SOCK"

    port_free "$RD_PORT" "$RD_NAME" "the port (--port, IDEM_REDIS_PORT or REDIS_PORT)"
    local sock=()
    [ -z "$RD_SOCK" ] || sock=(--unixsocket "$RD_SOCK" --unixsocketperm 700)
    "$REDIS_SERVER" --port "$RD_PORT" --bind 127.0.0.1 \
        ${sock[@]+"${sock[@]}"} \
        --save '' --appendonly no --daemonize yes \
        --pidfile "$RD_PID" --logfile "$RD_LOG" --dir "$RD_DIR" \
        ${RD_OPTS[@]+"${RD_OPTS[@]}"} \
        </dev/null >>"$RD_LOG" 2>&1 9>&- \
        || { log_tail "$RD_LOG"; die "$RD_NAME: redis-server failed to start"; }

    for ((i = 0; i < START_TIMEOUT * 10; i++)); do
        pid=$(redis_running) && break
        # daemonized: gone after its pid file appeared, or never wrote one
        if [ $i -ge 20 ] && ! pid_of "$RD_PID" redis-server >/dev/null; then
            break
        fi
        sleep 0.1
    done
    if ! pid=$(redis_running); then
        log_tail "$RD_LOG"
        die "$RD_NAME: no answer on $(rd_where) (its log above says why)"
    fi
    echo "$RD_NAME: started (pid $pid, $(rd_where))"
    note_started "$RD_NAME"
}

# SIGTERM: without save points (--save '') Redis exits without saving
redis_stop() {
    local pid
    if pid=$(pid_of "$RD_PID" redis-server); then
        kill -CONT "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "$RD_NAME: pid $pid did not stop"
        echo "$RD_NAME: stopped (pid $pid)"
    else
        echo "$RD_NAME: not running"
    fi
    rm -f "$RD_PID"
    [ -z "$RD_SOCK" ] || rm -f "$RD_SOCK"
}

redis_status() {
    local pid
    need_redis_bins
    if pid=$(redis_running); then
        echo "$RD_NAME: running (pid $pid, $(rd_where))"
        return 0
    elif pid=$(pid_of "$RD_PID" redis-server); then
        echo "$RD_NAME: pid $pid alive but not answering"
    else
        echo "$RD_NAME: stopped"
    fi
    return 1
}

redis_reset() {
    need_redis_bins
    redis_running >/dev/null || die "$RD_NAME: not running (scripts/services.sh start)"
    [ "$(rd_cli flushall 2>&1)" = OK ] || die "$RD_NAME: FLUSHALL failed"
    echo "$RD_NAME: flushed"
}

# ------------------------------------------------------ application servers

# A server of the default set is described by AS_* variables (appsrv_use
# php-fpm|uwsgi): its directory, pid file, log, configuration file and
# binary.
appsrv_use() {
    AS_NAME=$1
    AS_DIR=$SVC/$1
    AS_PID=$AS_DIR/$1.pid
    AS_LOG=$AS_DIR/$1.log
    AS_COUNTS=$AS_DIR/counts
    AS_TERM_SOCK=""
    case $1 in
        php-fpm)
            AS_PORT=$PHPFPM_PORT
            AS_TERM_SOCK=$SVC/php-fpm-term.sock
            AS_CONF=$AS_DIR/php-fpm.conf
            AS_COMM=php-fpm
            AS_BIN=$(find_bin php-fpm8.2 php-fpm) \
                || die "php-fpm not found (run scripts/deps.sh: package php8.2-fpm)" ;;
        uwsgi)
            AS_PORT=$UWSGI_PORT
            AS_CONF=$AS_DIR/uwsgi.ini
            AS_COMM=uwsgi
            AS_BIN=$(find_bin uwsgi-core uwsgi) \
                || die "uwsgi not found (run scripts/deps.sh: packages uwsgi-core uwsgi-plugin-python3)" ;;
        *)  die "no application server '$1'" ;;
    esac
}

# PHP-FPM: a pool "app" on the port without a time limit, and a pool
# "term" on a unix socket whose requests PHP-FPM ends after 2 s
# (request_terminate_timeout).  Five static workers each, so concurrent
# requests run in several processes; no php.ini (-n), only the posix
# extension (the app's kill=1).
phpfpm_pool() {     # NAME LISTEN TERMINATE
    cat <<EOF

[$1]
listen = $2
listen.mode = 0666
listen.backlog = 1024
pm = static
pm.max_children = 5
request_terminate_timeout = $3
catch_workers_output = yes
decorate_workers_output = no
clear_env = yes
env[IDEM_COUNT_DIR] = $AS_COUNTS
security.limit_extensions = .php
php_admin_value[output_buffering] = 0
php_admin_value[expose_php] = 0
php_admin_value[log_errors] = 1
php_admin_value[display_errors] = 0
EOF
}

phpfpm_conf() {
    cat <<EOF
; written by scripts/services.sh: the suite's own PHP-FPM
[global]
pid = $AS_PID
error_log = $AS_LOG
log_level = notice
daemonize = yes
process_control_timeout = 5s
EOF
    phpfpm_pool app "127.0.0.1:$AS_PORT" 0
    phpfpm_pool term "$AS_TERM_SOCK" 2s
}

# uWSGI: a master and five workers of backend/wsgi.py on the port, and
# on a unix socket that speaks FastCGI (sock/fcgi.sock: a FastCGI server
# that reads the whole request, so that a worker that dies mid-answer
# closes cleanly), with an operator's harakiri of 30 s (the app lowers it
# for a request with harakiri=S).
uwsgi_conf() {
    cat <<EOF
; written by scripts/services.sh: the suite's own uWSGI
[uwsgi]
plugins = python3
uwsgi-socket = 127.0.0.1:$AS_PORT
fastcgi-socket = $AS_DIR/sock/fcgi.sock
chmod-socket = 666
listen = 128
master = true
processes = 5
wsgi-file = $ROOT/backend/wsgi.py
need-app = true
env = IDEM_COUNT_DIR=$AS_COUNTS
harakiri = 30
pidfile = $AS_PID
daemonize = $AS_LOG
die-on-term = true
ignore-sigpipe = true
ignore-write-errors = true
disable-write-exception = true
EOF
}

# the server answers on its port: PHP-FPM an FCGI_GET_VALUES, uWSGI a
# request for /__count
appsrv_answers() {
    "$PYTHON" - "$AS_NAME" "$AS_PORT" 2>/dev/null <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2)
if sys.argv[1] == "php-fpm":
    s.sendall(b"\x01\x09\x00\x00\x00\x11\x07\x00\x0f\x00FCGI_MPXS_CONNS"
              + b"\0" * 7)
    sys.exit(0 if s.makefile("rb").read(2) == b"\x01\x0a" else 1)
env = b""
for k, v in ((b"REQUEST_METHOD", b"GET"), (b"PATH_INFO", b"/__count"),
             (b"QUERY_STRING", b""), (b"SERVER_PROTOCOL", b"HTTP/1.0")):
    env += struct.pack("<H", len(k)) + k + struct.pack("<H", len(v)) + v
s.sendall(struct.pack("<BHB", 0, len(env), 0) + env)
sys.exit(0 if s.makefile("rb").read(12) == b"HTTP/1.0 200" else 1)
PY
}

appsrv_running() {
    local pid
    pid=$(pid_of "$AS_PID" "$AS_COMM") || return 1
    appsrv_answers || return 1
    echo "$pid"
}

appsrv_stop() {
    local pid
    if pid=$(pid_of "$AS_PID" "$AS_COMM"); then
        kill -CONT "$pid" 2>/dev/null || true
        kill -TERM "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "$AS_NAME: pid $pid did not stop"
        echo "$AS_NAME: stopped (pid $pid)"
    else
        echo "$AS_NAME: not running"
    fi
    rm -f "$AS_PID" "$AS_DIR/sock/fcgi.sock"
    [ -z "$AS_TERM_SOCK" ] || rm -f "$AS_TERM_SOCK"
}

# starts the server, or keeps a running one whose configuration is the
# same (a new port restarts it)
appsrv_start() {
    local pid i conf
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (scripts/deps.sh)"
    mkdir -p "$AS_DIR" "$AS_COUNTS"
    if [ "$AS_NAME" = php-fpm ]; then
        check_socket_path "$AS_TERM_SOCK"
        conf=$(phpfpm_conf)
    else
        check_socket_path "$AS_DIR/sock/fcgi.sock"
        conf=$(uwsgi_conf)
    fi
    if pid=$(appsrv_running) \
            && [ "$conf" = "$(cat "$AS_CONF" 2>/dev/null)" ]; then
        echo "$AS_NAME: running (pid $pid, 127.0.0.1:$AS_PORT)"
        return 0
    fi
    appsrv_stop >/dev/null
    port_free "$AS_PORT" "$AS_NAME" "$( [ "$AS_NAME" = php-fpm ] \
        && echo PHPFPM_PORT || echo UWSGI_PORT)"
    # The workers run as the user who starts the server, root included
    # (PHP-FPM's -R), as Test::Nginx runs the tests' nginx: workers that
    # dropped to nobody could not reach the app, its counts, its log or
    # uWSGI's socket in a checkout under a folder others cannot enter
    # (root's home, any mktemp -d folder)
    mkdir -p "$AS_DIR/sock"
    echo "$conf" > "$AS_CONF"
    : >> "$AS_LOG"
    if [ "$AS_NAME" = php-fpm ]; then
        local asroot=()
        [ "$(id -u)" != 0 ] || asroot=(-R)
        setsid "$AS_BIN" -n -y "$AS_CONF" -d extension=posix ${asroot[@]+"${asroot[@]}"} \
            </dev/null >>"$AS_LOG" 2>&1 9>&- \
            || { log_tail "$AS_LOG"; die "php-fpm failed to start"; }
    else
        setsid "$AS_BIN" --ini "$AS_CONF" \
            </dev/null >>"$AS_LOG" 2>&1 9>&- \
            || { log_tail "$AS_LOG"; die "uwsgi failed to start"; }
    fi
    for ((i = 0; i < START_TIMEOUT * 10; i++)); do
        pid=$(appsrv_running) && break
        if [ $i -ge 30 ] && ! pid_of "$AS_PID" "$AS_COMM" >/dev/null; then
            break
        fi
        sleep 0.1
    done
    if ! pid=$(appsrv_running); then
        log_tail "$AS_LOG"
        die "$AS_NAME: no answer on 127.0.0.1:$AS_PORT (its log above says why)"
    fi
    echo "$AS_NAME: started (pid $pid, 127.0.0.1:$AS_PORT, log $AS_LOG)"
    note_started "$AS_NAME"
}

appsrv_status() {
    local pid
    if pid=$(appsrv_running); then
        echo "$AS_NAME: running (pid $pid, 127.0.0.1:$AS_PORT)"
        return 0
    elif pid=$(pid_of "$AS_PID" "$AS_COMM"); then
        echo "$AS_NAME: pid $pid alive but not answering"
    else
        echo "$AS_NAME: stopped"
    fi
    return 1
}

appsrv_reset() {
    appsrv_running >/dev/null \
        || die "$AS_NAME: not running (scripts/services.sh start)"
    find "$AS_COUNTS" -mindepth 1 -maxdepth 1 -type f -delete
    echo "$AS_NAME: execution counts emptied"
}

appsrv_each() {     # appsrv_each FUNCTION: on PHP-FPM, then uWSGI
    local rc=0
    appsrv_use php-fpm; "$1" || rc=1
    appsrv_use uwsgi; "$1" || rc=1
    return $rc
}

# ---------------------------------------------------------------- backend

APP=$ROOT/backend/app.py

backend_pid() {     # pidfile -> pid of a live backend/app.py
    local pid
    [ -s "$1" ] || return 1
    pid=$(tr -dc '0-9' < "$1")
    [ -n "$pid" ] && alive "$pid" || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'app\.py' || return 1
    echo "$pid"
}

backend_answers() {
    curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$1/__count" 2>/dev/null
}

backend_stop() {
    local pidfile=$1 quiet=${2:-} pid i
    if pid=$(backend_pid "$pidfile"); then
        kill "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        alive "$pid" && kill -9 "$pid" 2>/dev/null || true
        [ -n "$quiet" ] || echo "backend: stopped (pid $pid)"
    else
        [ -n "$quiet" ] || echo "backend: not running"
    fi
    rm -f "$pidfile"
}

backend_start() {
    local port=$1 pidfile=$2 logfile=$3 pid i
    local where="127.0.0.1:$1"
    [ -n "$port" ] && [ -n "$pidfile" ] && [ -n "$logfile" ] \
        || die "usage: $0 backend start PORT PIDFILE LOGFILE"
    if pid=$(backend_pid "$pidfile") && backend_answers "$port"; then
        echo "backend: running (pid $pid, $where)"
        return 0
    fi
    backend_stop "$pidfile" -q
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (scripts/deps.sh)"
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"

    port_free "$port" backend "its port (BACKEND_PORT, TEST_BACKEND_PORT)"
    # BACKEND_ARGS: more options of backend/app.py (make run: --bank-db)
    setsid "$PYTHON" "$APP" --host 127.0.0.1 --port "$port" \
        ${BACKEND_ARGS:-} --pidfile "$pidfile" --log "$logfile" \
        </dev/null >>"$logfile" 2>&1 9>&- &
    local spid=$!

    for ((i = 0; i < 100; i++)); do
        if ! alive "$spid"; then
            tail -n 15 "$logfile" >&2
            die "backend exited at startup (its log above says why)"
        fi
        [ -s "$pidfile" ] && backend_answers "$port" && break
        sleep 0.1
    done
    backend_answers "$port" || { tail -n 15 "$logfile" >&2; die "backend: no answer on port $port"; }
    echo "backend: started (pid $spid, $where, log $logfile)"
}

backend_cmd() {
    case ${1:-} in
        start)   backend_start "${2:-}" "${3:-}" "${4:-}" ;;
        restart) backend_stop "${3:?pidfile}" -q
                 backend_start "${2:-}" "${3:-}" "${4:-}" ;;
        stop)    backend_stop "${2:?pidfile}" "${3:-}" ;;
        status)
            local pid
            if pid=$(backend_pid "${2:?pidfile}"); then
                echo "backend: running (pid $pid)"
            else
                echo "backend: stopped"; return 1
            fi ;;
        *) echo "usage: $0 backend start|restart PORT PIDFILE LOGFILE | stop|status PIDFILE [-q]" >&2
           exit 2 ;;
    esac
}

# ------------------------------------------------------------ gRPC server

GRPC_APP=$ROOT/t/tools/grpc-server.js

grpc_pid() {        # pidfile -> pid of a live grpc-server.js
    local pid
    [ -s "$1" ] || return 1
    pid=$(tr -dc '0-9' < "$1")
    [ -n "$pid" ] && alive "$pid" || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'grpc-server\.js' \
        || return 1
    echo "$pid"
}

grpc_stop() {
    local pidfile=$1 quiet=${2:-} pid
    if pid=$(grpc_pid "$pidfile"); then
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 5 || true
        [ -n "$quiet" ] || echo "grpc: stopped (pid $pid)"
    else
        [ -n "$quiet" ] || echo "grpc: not running"
    fi
    rm -f "$pidfile"
}

grpc_start() {
    local port=$1 pidfile=$2 logfile=$3 pid i
    [ -n "$port" ] && [ -n "$pidfile" ] && [ -n "$logfile" ] \
        || die "usage: $0 grpc start PORT PIDFILE LOGFILE"
    if pid=$(grpc_pid "$pidfile"); then
        echo "grpc: running (pid $pid, 127.0.0.1:$port)"
        return 0
    fi
    command -v node >/dev/null 2>&1 || die "node not found (scripts/deps.sh)"
    "$ROOT/scripts/node-deps.sh" --check 9>&- || die "grpc: scripts/node-deps.sh first"
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
    rm -f "$pidfile"

    port_free "$port" grpc "its port (TEST_GRPC_PORT)"
    setsid node "$GRPC_APP" --port "$port" --pidfile "$pidfile" --log "$logfile" \
        </dev/null >>"$logfile" 2>&1 9>&- &
    local spid=$!

    # the pid file is written once the server listens
    for ((i = 0; i < 100; i++)); do
        alive "$spid" || { tail -n 15 "$logfile" >&2
                           die "grpc: exited at startup (its log above says why)"; }
        [ -s "$pidfile" ] && break
        sleep 0.1
    done
    [ -s "$pidfile" ] || die "grpc: no answer on port $port"
    echo "grpc: started (pid $spid, 127.0.0.1:$port, log $logfile)"
}

grpc_cmd() {
    case ${1:-} in
        start)   grpc_start "${2:-}" "${3:-}" "${4:-}" ;;
        restart) grpc_stop "${3:?pidfile}" -q
                 grpc_start "${2:-}" "${3:-}" "${4:-}" ;;
        stop)    grpc_stop "${2:?pidfile}" "${3:-}" ;;
        status)  grpc_pid "${2:?pidfile}" >/dev/null \
                     && echo "grpc: running" || { echo "grpc: stopped"; return 1; } ;;
        *) echo "usage: $0 grpc start|restart PORT PIDFILE LOGFILE | stop|status PIDFILE [-q]" >&2
           exit 2 ;;
    esac
}

# ------------------------------------------------------------------- main

print_env() {
    mysql_use 1
    redis_use
    cat <<EOF
IDEM_MYSQL_HOST=127.0.0.1
IDEM_MYSQL_PORT=$MY_PORT
IDEM_MYSQL_SOCKET=$MY_SOCK
IDEM_MYSQL_USER=$MY_USER
IDEM_MYSQL_PASSWORD=$MY_PASSWORD
IDEM_MYSQL_DB=$MY_DB
IDEM_MYSQL2_PORT=$MYSQL2_PORT
IDEM_MYSQL2_SOCKET=$SVC/mysql2.sock
IDEM_REDIS_HOST=127.0.0.1
IDEM_REDIS_PORT=$RD_PORT
IDEM_REDIS_SOCKET=$RD_SOCK
IDEM_PHPFPM_PORT=$PHPFPM_PORT
IDEM_PHPFPM_TERM_SOCKET=$SVC/php-fpm-term.sock
IDEM_UWSGI_PORT=$UWSGI_PORT
EOF
}

# start --started FILE: the default set's servers this start started (not
# those already running) are added to FILE, one name a line; stop
# --started FILE stops only those, and removes FILE
STARTED_FILE=
note_started() {
    [ -z "$STARTED_FILE" ] || echo "$1" >> "$STARTED_FILE"
}

stop_started() {
    local name
    [ -f "$STARTED_FILE" ] || return 0
    for name in $(sort -u "$STARTED_FILE"); do
        case $name in
            mysql)   mysql_use 1; mysql_stop ;;
            mysql2)  mysql_use 2; mysql_stop ;;
            redis)   redis_use; redis_stop ;;
            php-fpm|uwsgi) appsrv_use "$name"; appsrv_stop ;;
        esac
    done
    rm -f "$STARTED_FILE"
}

lock() {   # serialize concurrent start/stop/reset of a directory's services
    mkdir -p "$1"
    exec 9>"$1/.lock"
    if ! flock -n 9; then
        echo "services: waiting for another services.sh on $1..." >&2
        flock 9
    fi
}

usage() {
    cat >&2 <<EOF
usage: $0 start|stop|restart|status|reset|env
       $0 start|stop --started FILE
       $0 mysql start|stop|status|provision|reset DIR [OPTION...] [-- MARIADBD-OPTION...]
       $0 redis start|stop|status|reset DIR [OPTION...] [-- REDIS-SERVER-OPTION...]
       $0 php-fpm|uwsgi start|stop|status|reset
       $0 backend start|restart PORT PIDFILE LOGFILE | stop|status PIDFILE [-q]
       $0 grpc start|restart PORT PIDFILE LOGFILE | stop|status PIDFILE [-q]
EOF
    exit 2
}

cmd=${1:-status}
[ $# -eq 0 ] || shift
if [ "$cmd" = start ] || [ "$cmd" = stop ]; then
    case ${1:-} in
        --started) [ -n "${2:-}" ] || usage; STARTED_FILE=$2
                   case $STARTED_FILE in /*) ;; *) STARTED_FILE=$PWD/$STARTED_FILE ;; esac ;;
        '') ;;
        *) usage ;;
    esac
fi
case $cmd in
    start)   lock "$SVC"; mysql_each mysql_start; redis_use; redis_start
             appsrv_each appsrv_start ;;
    stop)    lock "$SVC"
             if [ -n "$STARTED_FILE" ]; then stop_started; exit; fi
             mysql_each mysql_stop; redis_use; redis_stop
             appsrv_each appsrv_stop ;;
    restart) lock "$SVC"; mysql_each mysql_stop; redis_use; redis_stop
             appsrv_each appsrv_stop
             mysql_each mysql_start; redis_use; redis_start
             appsrv_each appsrv_start ;;
    reset)   lock "$SVC"; mysql_each mysql_reset; redis_use; redis_reset
             appsrv_each appsrv_reset ;;
    status)  rc=0; mysql_each mysql_status || rc=1
             redis_use; redis_status || rc=1
             appsrv_each appsrv_status || rc=1; exit $rc ;;
    env)     print_env ;;
    mysql)
        sub=${1:-}; [ $# -eq 0 ] || shift
        mysql_args "$@"
        case $sub in
            start)     lock "$MY_DIR"; mysql_start ;;
            stop)      lock "$MY_DIR"; mysql_stop ;;
            status)    mysql_status ;;
            provision) lock "$MY_DIR"; mysql_provision_cmd ;;
            reset)     mysql_reset ;;
            *)         usage ;;
        esac ;;
    redis)
        sub=${1:-}; [ $# -eq 0 ] || shift
        redis_args "$@"
        case $sub in
            start)  lock "$RD_DIR"; redis_start ;;
            stop)   lock "$RD_DIR"; redis_stop ;;
            status) redis_status ;;
            reset)  redis_reset ;;
            *)      usage ;;
        esac ;;
    php-fpm|uwsgi)
        appsrv_use "$cmd"
        case ${1:-} in
            start)  lock "$SVC"; appsrv_start ;;
            stop)   lock "$SVC"; appsrv_stop ;;
            status) appsrv_status ;;
            reset)  appsrv_reset ;;
            *)      usage ;;
        esac ;;
    backend) backend_cmd "$@" ;;
    grpc)    grpc_cmd "$@" ;;
    *)       usage ;;
esac
