
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: a statement's result, into its op.
 *
 * Results are stored (mysql_store_result, mysql_stmt_store_result)
 * before they are read here, so nothing here does I/O: a leaf that
 * copies what the driver holds into op->pool, as text, the way the
 * text protocol gives it.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_RESULT_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_RESULT_H_INCLUDED_


#include <mysql.h>

#include "ngx_http_idempotency_mysql.h"


/* the first row of a text result set; res is freed */
ngx_int_t ngx_http_idempotency_result_text(ngx_http_idempotency_op_t *op,
    MYSQL_RES *res);

/*
 * A prepared statement's stored result, bound through bind (room for
 * NGX_HTTP_IDEMPOTENCY_MAX_FIELDS): the op gets the first row, or, for
 * a statement of a batch, the ops still in it (op->batch_next) each get
 * the row that is theirs (op->match).
 */
ngx_int_t ngx_http_idempotency_result_stmt(ngx_http_idempotency_op_t *op,
    MYSQL_STMT *stmt, MYSQL_BIND *bind, ngx_uint_t batch);


#endif /* _NGX_HTTP_IDEMPOTENCY_RESULT_H_INCLUDED_ */
