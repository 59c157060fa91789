# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause
#
# bench/keytable.sh, sourced by bench/sqlcost.sh and bench/pagefill.sh:
# the key table of the services' MariaDB (ROOT and SOCK set by the
# caller), as root.

mysql_root() {
    mariadb --no-defaults --protocol=socket --socket="$SOCK" -uroot \
        idempotency "$@"
}

# the table made anew from mysql/schema.sql, then the ALTERs of the
# variant file $1 (a path under ROOT) unless $1 is "schema" or absent
table() {
    mysql_root -e 'DROP TABLE IF EXISTS idempotency_keys'
    mysql_root < "$ROOT/mysql/schema.sql"

    if [ "${1:-schema}" != schema ]; then
        mysql_root < "$ROOT/$1"
    fi
}
