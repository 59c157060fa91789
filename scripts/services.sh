#!/usr/bin/env bash
# Private MariaDB and Redis instances for development, tests and the demo.
#
#   scripts/services.sh start|stop|restart|status|reset|env
#
# All state lives under build/services/ of the checkout.  The system
# instances (/var/lib/mysql, /etc/mysql, ports 3306/6379) are never used:
# every client and server call passes --no-defaults and explicit paths.
#
# Environment (defaults in brackets):
#   IDEM_MYSQL_PORT [3307]  IDEM_REDIS_PORT [6380]  IDEM_SERVICES_DIR [build/services]
#   IDEM_MYSQL2_PORT [3308] a second MariaDB (build/services/shard2), the
#                           second shard of the sharding tests; 0: none
#   IDEM_START_TIMEOUT [60] seconds to wait for a server to answer

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SVC=${IDEM_SERVICES_DIR:-$ROOT/build/services}
case $SVC in /*) ;; *) SVC=$ROOT/$SVC ;; esac

MYSQL1_PORT=${IDEM_MYSQL_PORT:-3307}
MYSQL2_PORT=${IDEM_MYSQL2_PORT:-3308}
REDIS_PORT=${IDEM_REDIS_PORT:-6380}
START_TIMEOUT=${IDEM_START_TIMEOUT:-60}

MYSQL_DB=idempotency
MYSQL_USER=idem
MYSQL_PASSWORD=idem-secret
SCHEMA=$ROOT/mysql/schema.sql

# mysql_use N: the MariaDB instance the mysql_* functions work on.
# Instance 1 is the store of the suite and the demo; instance 2 is a
# second, independent server for the shard tests.
mysql_use() {
    if [ "$1" = 1 ]; then
        MY_DIR=$SVC MY_NAME=mysql MYSQL_PORT=$MYSQL1_PORT
    else
        MY_DIR=$SVC/shard2 MY_NAME=mysql2 MYSQL_PORT=$MYSQL2_PORT
    fi
    MY_DATA=$MY_DIR/mysql-data
    MY_SOCK=$SVC/$MY_NAME.sock
    MY_PID=$MY_DIR/mysql.pid
    MY_LOG=$MY_DIR/mysql.log
    mkdir -p "$MY_DIR"
}

mysql_each() {      # mysql_each FUNCTION: run it on every instance
    local rc=0
    mysql_use 1; "$1" || rc=1
    if [ "$MYSQL2_PORT" != 0 ]; then
        mysql_use 2; "$1" || rc=1
    fi
    return $rc
}

RD_SOCK=$SVC/redis.sock
RD_PID=$SVC/redis.pid
RD_LOG=$SVC/redis.log

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
  set IDEM_SERVICES_DIR to a shorter directory"
    fi
}

alive() {           # pid exists and is not a zombie waiting to be reaped
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

pid_of() {          # pidfile -> pid on stdout if the process is alive
    local pid
    [ -s "$1" ] || return 1
    pid=$(tr -dc '0-9' < "$1")
    [ -n "$pid" ] && alive "$pid" || return 1
    # guard against pid reuse: the process must be the expected program
    case $(cat "/proc/$pid/comm" 2>/dev/null) in
        $2*) echo "$pid"; return 0 ;;
    esac
    return 1
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
    kill -9 "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        alive "$pid" || return 0
        sleep 0.1
    done
    return 1
}

# ---------------------------------------------------------------- MariaDB

my_root() {   # run the client as root over the private socket
    "$MYSQL" --no-defaults --protocol=socket --socket="$MY_SOCK" -uroot "$@"
}

my_ping() {
    "$MYADMIN" --no-defaults --protocol=socket --socket="$MY_SOCK" -uroot \
        --connect-timeout=2 ping >/dev/null 2>&1
}

mysql_running() {
    local pid
    pid=$(pid_of "$MY_PID" mariadbd) || pid=$(pid_of "$MY_PID" mysqld) \
        || return 1
    my_ping || return 1
    echo "$pid"
}

mysql_provision() {
    my_root <<SQL || return 1
CREATE DATABASE IF NOT EXISTS \`$MYSQL_DB\`;
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'localhost' IDENTIFIED BY '$MYSQL_PASSWORD';
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$MYSQL_PASSWORD';
ALTER USER '$MYSQL_USER'@'localhost' IDENTIFIED BY '$MYSQL_PASSWORD';
ALTER USER '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$MYSQL_PASSWORD';
REVOKE ALL PRIVILEGES, GRANT OPTION FROM '$MYSQL_USER'@'localhost';
REVOKE ALL PRIVILEGES, GRANT OPTION FROM '$MYSQL_USER'@'127.0.0.1';
GRANT SELECT, INSERT, UPDATE, DELETE ON \`$MYSQL_DB\`.* TO '$MYSQL_USER'@'localhost';
GRANT SELECT, INSERT, UPDATE, DELETE ON \`$MYSQL_DB\`.* TO '$MYSQL_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
    mysql_schema
}

# Apply mysql/schema.sql.  Its checksum is remembered: when the schema file
# changes, the (development-only) table is dropped and created anew, since
# CREATE TABLE IF NOT EXISTS would silently keep the old definition.
mysql_schema() {
    local sum old=""
    [ -f "$SCHEMA" ] || { echo "services: warning: $SCHEMA missing, no table created" >&2; return 0; }
    sum=$(sha256sum < "$SCHEMA" | cut -d' ' -f1)
    [ -f "$MY_DIR/schema.sha256" ] && old=$(cat "$MY_DIR/schema.sha256")
    if [ -n "$old" ] && [ "$old" != "$sum" ]; then
        echo "$MY_NAME: mysql/schema.sql changed: recreating table idempotency_keys"
        my_root "$MYSQL_DB" -e 'DROP TABLE IF EXISTS idempotency_keys' || return 1
    fi
    my_root "$MYSQL_DB" < "$SCHEMA" || return 1
    echo "$sum" > "$MY_DIR/schema.sha256"
}

mysql_start() {
    local pid i
    need_mysql_bins
    check_socket_path "$MY_SOCK"

    if pid=$(mysql_running); then
        mysql_provision || die "$MY_NAME: provisioning failed"
        echo "$MY_NAME: running (pid $pid, 127.0.0.1:$MYSQL_PORT, socket $MY_SOCK)"
        return 0
    fi

    # A live server that does not answer yet (still starting, or hung).
    if pid=$(pid_of "$MY_PID" mariadbd || pid_of "$MY_PID" mysqld); then
        for ((i = 0; i < START_TIMEOUT * 10; i++)); do
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

        if [ ! -d "$MY_DATA/mysql" ]; then
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

        : > "$MY_LOG.start"
        # setsid: not part of the caller's process group (make, CI job).
        # 9>&-: do not inherit the lock descriptor.
        setsid "$MARIADBD" --no-defaults --user="$(id -un)" \
            --datadir="$MY_DATA" --socket="$MY_SOCK" \
            --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
            --pid-file="$MY_PID" --log-error="$MY_LOG" \
            --skip-name-resolve --skip-log-bin \
            --innodb-buffer-pool-size=64M \
            --innodb-log-file-size=32M \
            --innodb-flush-log-at-trx-commit=2 \
            --max-connections=500 \
            --thread-handling=pool-of-threads \
            --innodb-spin-wait-delay=0 \
            --character-set-server=utf8mb4 \
            --default-time-zone=+00:00 \
            </dev/null >>"$MY_LOG.start" 2>&1 9>&- &
        local spid=$!

        for ((i = 0; i < START_TIMEOUT * 10; i++)); do
            if ! alive "$spid"; then
                log_tail "$MY_LOG"
                log_tail "$MY_LOG.start" 10
                die "$MY_NAME: mariadbd exited during startup (port $MYSQL_PORT busy?)"
            fi
            my_ping && break
            sleep 0.1
        done
        if ! my_ping; then
            log_tail "$MY_LOG"
            die "$MY_NAME: no answer on $MY_SOCK after ${START_TIMEOUT}s (pid $spid still running)"
        fi
        # the pid file is written by mariadbd itself; make sure it is there
        [ -s "$MY_PID" ] || echo "$spid" > "$MY_PID"
        pid=$spid
        # mariadb-install-db also creates root@<hostname>, which only
        # produces warnings under --skip-name-resolve
        if [ -f "$MY_DIR/mysql.fresh" ]; then
            my_root -N -e "SELECT CONCAT('DROP USER IF EXISTS ', QUOTE(user), '@', QUOTE(host), ';') FROM mysql.user WHERE host NOT IN ('localhost', '127.0.0.1', '::1', '%')" \
                | my_root && rm -f "$MY_DIR/mysql.fresh"
        fi
    fi

    mysql_provision || { log_tail "$MY_LOG"; die "$MY_NAME: provisioning failed"; }
    echo "$MY_NAME: started (pid $pid, 127.0.0.1:$MYSQL_PORT, socket $MY_SOCK)"
}

mysql_stop() {
    local pid
    need_mysql_bins
    if pid=$(pid_of "$MY_PID" mariadbd || pid_of "$MY_PID" mysqld); then
        "$MYADMIN" --no-defaults --protocol=socket --socket="$MY_SOCK" -uroot \
            --connect-timeout=2 shutdown >/dev/null 2>&1 \
            || kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 30 || die "$MY_NAME: pid $pid did not stop"
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
        echo "$MY_NAME: running (pid $pid, 127.0.0.1:$MYSQL_PORT, socket $MY_SOCK, user $MYSQL_USER/$MYSQL_PASSWORD, db $MYSQL_DB)"
        return 0
    elif pid=$(pid_of "$MY_PID" mariadbd || pid_of "$MY_PID" mysqld); then
        echo "$MY_NAME: pid $pid alive but not answering on $MY_SOCK"
    else
        echo "$MY_NAME: stopped"
    fi
    return 1
}

mysql_reset() {
    need_mysql_bins
    mysql_running >/dev/null || die "$MY_NAME: not running (scripts/services.sh start)"
    my_root "$MYSQL_DB" -e 'TRUNCATE TABLE idempotency_keys' \
        || die "$MY_NAME: TRUNCATE failed"
    echo "$MY_NAME: table idempotency_keys truncated"
}

# ------------------------------------------------------------------ Redis

rd_cli() {
    "$REDIS_CLI" -s "$RD_SOCK" "$@"
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
    check_socket_path "$RD_SOCK"
    if pid=$(redis_running); then
        echo "redis: running (pid $pid, 127.0.0.1:$REDIS_PORT, socket $RD_SOCK)"
        return 0
    fi
    if pid=$(pid_of "$RD_PID" redis-server); then
        echo "redis: pid $pid does not answer; killing it" >&2
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "redis: cannot stop pid $pid"
    fi
    rm -f "$RD_PID" "$RD_SOCK"

    "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 \
        --unixsocket "$RD_SOCK" --unixsocketperm 700 \
        --save '' --appendonly no --daemonize yes \
        --pidfile "$RD_PID" --logfile "$RD_LOG" --dir "$SVC" \
        </dev/null >>"$RD_LOG" 2>&1 9>&- \
        || { log_tail "$RD_LOG"; die "redis: redis-server failed to start"; }

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
        die "redis: no answer on $RD_SOCK (port $REDIS_PORT busy?)"
    fi
    echo "redis: started (pid $pid, 127.0.0.1:$REDIS_PORT, socket $RD_SOCK)"
}

redis_stop() {
    local pid
    need_redis_bins
    if pid=$(pid_of "$RD_PID" redis-server); then
        rd_cli shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || die "redis: pid $pid did not stop"
        echo "redis: stopped (pid $pid)"
    else
        echo "redis: not running"
    fi
    rm -f "$RD_PID" "$RD_SOCK"
}

redis_status() {
    local pid
    need_redis_bins
    if pid=$(redis_running); then
        echo "redis: running (pid $pid, 127.0.0.1:$REDIS_PORT, socket $RD_SOCK)"
        return 0
    elif pid=$(pid_of "$RD_PID" redis-server); then
        echo "redis: pid $pid alive but not answering on $RD_SOCK"
    else
        echo "redis: stopped"
    fi
    return 1
}

redis_reset() {
    need_redis_bins
    redis_running >/dev/null || die "redis: not running (scripts/services.sh start)"
    [ "$(rd_cli flushall 2>&1)" = OK ] || die "redis: FLUSHALL failed"
    echo "redis: flushed"
}

# ------------------------------------------------------------------- main

print_env() {
    mysql_use 1
    cat <<EOF
IDEM_MYSQL_HOST=127.0.0.1
IDEM_MYSQL_PORT=$MYSQL_PORT
IDEM_MYSQL_SOCKET=$MY_SOCK
IDEM_MYSQL_USER=$MYSQL_USER
IDEM_MYSQL_PASSWORD=$MYSQL_PASSWORD
IDEM_MYSQL_DB=$MYSQL_DB
IDEM_MYSQL2_PORT=$MYSQL2_PORT
IDEM_MYSQL2_SOCKET=$SVC/mysql2.sock
IDEM_REDIS_HOST=127.0.0.1
IDEM_REDIS_PORT=$REDIS_PORT
IDEM_REDIS_SOCKET=$RD_SOCK
EOF
}

lock() {   # serialize concurrent start/stop/reset from several shells
    mkdir -p "$SVC"
    exec 9>"$SVC/.lock"
    if ! flock -n 9; then
        echo "services: waiting for another services.sh in this checkout..." >&2
        flock 9
    fi
}

cmd=${1:-status}
case $cmd in
    start)   lock; mysql_each mysql_start; redis_start ;;
    stop)    lock; mysql_each mysql_stop; redis_stop ;;
    restart) lock; mysql_each mysql_stop; redis_stop
             mysql_each mysql_start; redis_start ;;
    reset)   lock; mysql_each mysql_reset; redis_reset ;;
    status)  rc=0; mysql_each mysql_status || rc=1
             redis_status || rc=1; exit $rc ;;
    env)     print_env ;;
    *)       echo "usage: $0 start|stop|restart|status|reset|env" >&2; exit 2 ;;
esac
