
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: a statement's result, into its op.
 *
 * Every value is copied into the op's pool as text: the driver converts
 * the numbers of a prepared statement's row, so an op reads its fields
 * the same whether its statement was prepared or sent as text.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_idempotency_result.h"


/*
 * A result column's buffer at first: the driver's max_length is the
 * largest value the statement has ever returned on its connection, not
 * this result's, so a longer value is fetched again at its own length
 */
#define NGX_HTTP_IDEMPOTENCY_RESULT_FETCH   4096


/* the columns of a fetched row, as the bound buffers hold them */
typedef struct {
    ngx_uint_t          n;
    u_char             *data[NGX_HTTP_IDEMPOTENCY_MAX_FIELDS];
    my_bool             nul[NGX_HTTP_IDEMPOTENCY_MAX_FIELDS];
    unsigned long       len[NGX_HTTP_IDEMPOTENCY_MAX_FIELDS];
} ngx_http_idempotency_row_t;


static ngx_int_t ngx_http_idempotency_result_all(
    ngx_http_idempotency_op_t *op, MYSQL_RES *res);
static ngx_int_t ngx_http_idempotency_result_bind(ngx_pool_t *pool,
    MYSQL_STMT *stmt, MYSQL_BIND *bind, ngx_http_idempotency_row_t *row);
static ngx_int_t ngx_http_idempotency_result_fetch(MYSQL_STMT *stmt,
    MYSQL_BIND *bind, ngx_http_idempotency_row_t *row, ngx_pool_t *pool);
static ngx_int_t ngx_http_idempotency_result_rows(
    ngx_http_idempotency_op_t *op, MYSQL_STMT *stmt, MYSQL_BIND *bind,
    ngx_http_idempotency_row_t *row, ngx_uint_t rows);
static ngx_int_t ngx_http_idempotency_result_copy(
    ngx_http_idempotency_op_t *op, MYSQL_BIND *bind,
    ngx_http_idempotency_row_t *row, ngx_uint_t own);


ngx_int_t
ngx_http_idempotency_result_text(ngx_http_idempotency_op_t *op,
    MYSQL_RES *res)
{
    u_char         *p;
    MYSQL_ROW       row;
    ngx_uint_t      i, n;
    unsigned long  *lengths;

    n = mysql_num_fields(res);

    op->nrows = (ngx_uint_t) mysql_num_rows(res);
    op->nfields = ngx_min(n, NGX_HTTP_IDEMPOTENCY_MAX_FIELDS);

    /* a stored result: fetching and freeing it does no I/O */

    row = mysql_fetch_row(res);
    lengths = row ? mysql_fetch_lengths(res) : NULL;

    for (i = 0; i < NGX_HTTP_IDEMPOTENCY_MAX_FIELDS; i++) {

        if (i >= op->nfields || row == NULL || row[i] == NULL) {
            ngx_str_null(&op->fields[i]);
            continue;
        }

        p = ngx_pnalloc(op->pool, lengths[i] ? lengths[i] : 1);
        if (p == NULL) {
            mysql_free_result(res);
            return NGX_ERROR;
        }

        ngx_memcpy(p, row[i], lengths[i]);

        op->fields[i].data = p;
        op->fields[i].len = lengths[i];
    }

    if (op->all_rows && op->nrows) {
        if (ngx_http_idempotency_result_all(op, res) != NGX_OK) {
            mysql_free_result(res);
            return NGX_ERROR;
        }
    }

    mysql_free_result(res);

    return NGX_OK;
}


/* every row, for the statements that list keys (admin.c) */

static ngx_int_t
ngx_http_idempotency_result_all(ngx_http_idempotency_op_t *op,
    MYSQL_RES *res)
{
    u_char         *p;
    ngx_str_t      *f;
    MYSQL_ROW       row;
    ngx_uint_t      i, r;
    unsigned long  *lengths;

    op->rows = ngx_pcalloc(op->pool,
                           op->nrows * op->nfields * sizeof(ngx_str_t));
    if (op->rows == NULL) {
        return NGX_ERROR;
    }

    mysql_data_seek(res, 0);

    for (r = 0; r < op->nrows; r++) {
        row = mysql_fetch_row(res);
        if (row == NULL) {
            return NGX_ERROR;
        }

        lengths = mysql_fetch_lengths(res);
        f = &op->rows[r * op->nfields];

        for (i = 0; i < op->nfields; i++) {
            if (row[i] == NULL) {
                continue;
            }

            p = ngx_pnalloc(op->pool, lengths[i] ? lengths[i] : 1);
            if (p == NULL) {
                return NGX_ERROR;
            }

            ngx_memcpy(p, row[i], lengths[i]);

            f[i].data = p;
            f[i].len = lengths[i];
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_result_stmt(ngx_http_idempotency_op_t *op,
    MYSQL_STMT *stmt, MYSQL_BIND *bind, ngx_uint_t batch)
{
    int                          rc;
    ngx_int_t                    ok;
    ngx_uint_t                   i, n, rows;
    ngx_pool_t                  *pool;
    ngx_http_idempotency_op_t   *m;
    ngx_http_idempotency_row_t   row;

    n = mysql_stmt_field_count(stmt);
    rows = (ngx_uint_t) mysql_stmt_num_rows(stmt);

    for (m = op; m; m = m->batch_next) {
        for (i = 0; i < NGX_HTTP_IDEMPOTENCY_MAX_FIELDS; i++) {
            ngx_str_null(&m->fields[i]);
        }

        m->nrows = 0;
        m->nfields = ngx_min(n, NGX_HTTP_IDEMPOTENCY_MAX_FIELDS);
    }

    ok = NGX_OK;
    pool = NULL;

    if (rows == 0) {
        goto done;
    }

    /*
     * The columns of a batch are bound to memory of their own, and each
     * op copies its row from there: the first op's pool, which a replay
     * may keep, does not hold every row of the batch.
     */

    batch = batch && op->match;

    pool = batch ? ngx_create_pool(4096, op->log) : op->pool;

    row.n = n;

    if (pool == NULL
        || n > NGX_HTTP_IDEMPOTENCY_MAX_FIELDS
        || ngx_http_idempotency_result_bind(pool, stmt, bind, &row)
           != NGX_OK)
    {
        ok = NGX_ERROR;
        goto done;
    }

    if (batch) {
        ok = ngx_http_idempotency_result_rows(op, stmt, bind, &row, rows);
        goto done;
    }

    rc = mysql_stmt_fetch(stmt);

    if ((rc != 0 && rc != MYSQL_DATA_TRUNCATED)
        || ngx_http_idempotency_result_fetch(stmt, bind, &row, pool)
           != NGX_OK)
    {
        ok = NGX_ERROR;
        goto done;
    }

    op->nrows = rows;

    for (i = 0; i < op->nfields; i++) {
        if (!row.nul[i]) {
            op->fields[i].data = row.data[i];
            op->fields[i].len = row.len[i];
        }
    }

done:

    (void) mysql_stmt_free_result(stmt);   /* stored: no I/O */

    if (batch && pool) {
        ngx_destroy_pool(pool);
    }

    return ok;
}


/* a buffer in pool for each column, bound as a string */

static ngx_int_t
ngx_http_idempotency_result_bind(ngx_pool_t *pool, MYSQL_STMT *stmt,
    MYSQL_BIND *bind, ngx_http_idempotency_row_t *row)
{
    size_t        size;
    MYSQL_RES    *meta;
    MYSQL_BIND   *b;
    ngx_uint_t    i;
    MYSQL_FIELD  *fields;

    meta = mysql_stmt_result_metadata(stmt);
    if (meta == NULL) {
        return NGX_ERROR;
    }

    fields = mysql_fetch_fields(meta);

    for (i = 0; i < row->n; i++) {
        b = &bind[i];
        ngx_memzero(b, sizeof(MYSQL_BIND));

        /* a number's max_length is its binary size; room for its text */
        size = ngx_min(ngx_max(fields[i].max_length, NGX_INT64_LEN) + 1,
                       NGX_HTTP_IDEMPOTENCY_RESULT_FETCH);

        b->buffer = ngx_pnalloc(pool, size);
        if (b->buffer == NULL) {
            mysql_free_result(meta);
            return NGX_ERROR;
        }

        b->buffer_type = MYSQL_TYPE_STRING;
        b->buffer_length = size;
        b->length = &row->len[i];
        b->is_null = &row->nul[i];
    }

    mysql_free_result(meta);

    if (mysql_stmt_bind_result(stmt, bind) != 0) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The fetched row's values: in the bound buffers, or, for one longer
 * than its buffer, fetched again whole into the pool (the row is stored:
 * no I/O).
 */

static ngx_int_t
ngx_http_idempotency_result_fetch(MYSQL_STMT *stmt, MYSQL_BIND *bind,
    ngx_http_idempotency_row_t *row, ngx_pool_t *pool)
{
    my_bool        null;
    ngx_uint_t     i;
    MYSQL_BIND     b;
    unsigned long  got;

    for (i = 0; i < row->n; i++) {
        row->data[i] = bind[i].buffer;

        if (row->nul[i] || row->len[i] <= bind[i].buffer_length) {
            continue;
        }

        ngx_memzero(&b, sizeof(MYSQL_BIND));

        b.buffer_type = MYSQL_TYPE_STRING;
        b.buffer = ngx_pnalloc(pool, row->len[i]);
        b.buffer_length = row->len[i];
        b.length = &got;
        b.is_null = &null;

        if (b.buffer == NULL
            || mysql_stmt_fetch_column(stmt, &b, i, 0) != 0
            || got != row->len[i])
        {
            return NGX_ERROR;
        }

        row->data[i] = b.buffer;
    }

    return NGX_OK;
}


/*
 * A batch's rows, each to the ops whose param match - 1 is its key (in
 * the bound buffer: a key is short).  A value longer than its buffer is
 * fetched straight into the pool of the first of them.
 */

static ngx_int_t
ngx_http_idempotency_result_rows(ngx_http_idempotency_op_t *op,
    MYSQL_STMT *stmt, MYSQL_BIND *bind, ngx_http_idempotency_row_t *row,
    ngx_uint_t rows)
{
    int                             rc;
    ngx_uint_t                      r, own;
    ngx_http_idempotency_op_t      *m;
    ngx_http_idempotency_param_t   *pm;

    for (r = 0; r < rows; r++) {
        rc = mysql_stmt_fetch(stmt);

        if ((rc != 0 && rc != MYSQL_DATA_TRUNCATED)
            || row->nul[0]
            || row->len[0] > bind[0].buffer_length)
        {
            return NGX_ERROR;
        }

        own = 1;

        for (m = op; m; m = m->batch_next) {
            pm = &m->params[op->match - 1];

            if (m->nparams < op->match
                || pm->data == NULL
                || pm->len != row->len[0]
                || ngx_memcmp(pm->data, bind[0].buffer, row->len[0]) != 0)
            {
                continue;
            }

            if ((own
                 && ngx_http_idempotency_result_fetch(stmt, bind, row,
                                                      m->pool)
                    != NGX_OK)
                || ngx_http_idempotency_result_copy(m, bind, row, own)
                   != NGX_OK)
            {
                return NGX_ERROR;
            }

            own = 0;
        }
    }

    return NGX_OK;
}


/*
 * A fetched row into one op of a batch, in its own pool; own: a long
 * value was fetched into that pool already, and stays where it is.
 */

static ngx_int_t
ngx_http_idempotency_result_copy(ngx_http_idempotency_op_t *op,
    MYSQL_BIND *bind, ngx_http_idempotency_row_t *row, ngx_uint_t own)
{
    u_char      *p;
    ngx_uint_t   i;

    for (i = 0; i < op->nfields; i++) {

        if (row->nul[i]) {
            ngx_str_null(&op->fields[i]);
            continue;
        }

        if (own && row->data[i] != bind[i].buffer) {
            op->fields[i].data = row->data[i];
            op->fields[i].len = row->len[i];
            continue;
        }

        p = ngx_pnalloc(op->pool, row->len[i] ? row->len[i] : 1);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(p, row->data[i], row->len[i]);

        op->fields[i].data = p;
        op->fields[i].len = row->len[i];
    }

    op->nrows = 1;

    return NGX_OK;
}
