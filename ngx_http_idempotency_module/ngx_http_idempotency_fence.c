
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: fence or find.
 *
 * The marker table lives where "idempotency_fence" says: a store (its
 * servers, account, shards, connections and query_timeout), usually one
 * for the backend's own database, and a table in it.  The fence is one
 * text round trip (sql.c) and runs only off the hot path: when a retry
 * finds its key of unknown outcome, a dead owner's lease, or a released
 * key.  What it finds
 * goes back to the claim through the next() it was given.
 */


#include "ngx_http_idempotency_fence.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_store.h"
#include "ngx_http_idempotency_ctx.h"


/* the longest result reference a marker gives back (its column's size) */
#define NGX_HTTP_IDEMPOTENCY_RESULT_MAX  1024


static void ngx_http_idempotency_fence_busy(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_shard_t *shard, ngx_uint_t max);
static void ngx_http_idempotency_fence_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_fence_end(ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_fence_gone(ngx_http_idempotency_op_t *op);
static ngx_http_idempotency_fence_e ngx_http_idempotency_fence_verdict(
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_op_t *op);


char *
ngx_http_idempotency_fence_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    u_char      *p;
    ngx_str_t   *value, table;
    ngx_uint_t   i;

    if (ilcf->fence != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        if (cf->args->nelts > 2) {
            i = 2;
            goto invalid;
        }

        ilcf->fence = NULL;
        return NGX_CONF_OK;
    }

    ngx_str_set(&table, "idempotency_fence");
    ilcf->fence_find = 1;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strcmp(value[i].data, "find=on") == 0
            || ngx_strcmp(value[i].data, "find=off") == 0)
        {
            ilcf->fence_find = (value[i].data[6] == 'n');
            continue;
        }

        if (ngx_strncmp(value[i].data, "table=", 6) != 0) {
            goto invalid;
        }

        table.data = value[i].data + 6;
        table.len = value[i].len - 6;

        /* it goes into the statements' text: [A-Za-z0-9_], up to 64 */

        if (table.len == 0 || table.len > 64) {
            goto invalid;
        }

        for (p = table.data; p < table.data + table.len; p++) {
            if (!((*p >= '0' && *p <= '9') || *p == '_'
                  || ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')))
            {
                goto invalid;
            }
        }
    }

    ilcf->fence = ngx_http_idempotency_find_store(cf, &value[1]);
    if (ilcf->fence == NULL) {
        return NGX_CONF_ERROR;
    }

    ilcf->fence->fence = 1;
    ilcf->fence_table = table;

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\" in \"%V\": expected a "
                       "store's name, \"table=\" (letters, digits and "
                       "\"_\", up to 64) and \"find=on|off\", or \"off\"",
                       &value[i], &cmd->name);

    return NGX_CONF_ERROR;
}


void
ngx_http_idempotency_fence(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_fence_pt next)
{
    ngx_uint_t                     max;
    ngx_http_idempotency_op_t     *op;
    ngx_http_idempotency_shard_t  *shard;
    ngx_http_idempotency_store_t  *store;

    store = ctx->conf->fence;
    shard = ngx_http_idempotency_shard(store, ctx->key_hash);

    ctx->fence.next = next;
    ctx->fence.op = NULL;

    /*
     * Fences come in storms (every retry of a stuck key fences) and may
     * each wait on a row lock: a quarter of the connections at most, so
     * that the renewals and completions of other keys on the same store
     * keep theirs.  A fence over the bound is undecided at once.
     */

    max = ngx_max(store->conns_max / 4, 1);

    if (shard->fences >= max) {
        ngx_http_idempotency_fence_busy(ctx, shard, max);
        next(ctx, NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED);
        return;
    }

    op = NULL;

    if (ngx_http_idempotency_on_end(ctx, ngx_http_idempotency_fence_end)
        == NGX_OK
        && ngx_http_idempotency_marker_hash(ctx->key_hash,
                                         ctx->has_life ? ctx->life : NULL,
                                         ctx->fence.marker)
        == NGX_OK)
    {
        /*
         * A backend's uncommitted marker holds its row lock: the INSERT
         * waits for it at most half of query_timeout (whole seconds,
         * InnoDB's unit; 0: no wait at all), so that the server gives up
         * the wait, rather than the module the op
         */

        op = ngx_http_idempotency_sql_fence(shard, ngx_cycle->log,
                                       &ctx->conf->fence_table,
                                       ctx->fence.marker, ctx->epoch,
                                       store->query_timeout / 2 / 1000);
    }

    if (op == NULL) {
        next(ctx, NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED);
        return;
    }

    ctx->fence.op = op;
    shard->fences++;

    op->handler = ngx_http_idempotency_fence_done;
    op->data = ctx;

    ctx->state = NGX_HTTP_IDEMPOTENCY_S_STORE;

    ngx_http_idempotency_op_run(op);
}


/* one line a second per worker, with the count of those not logged */

static void
ngx_http_idempotency_fence_busy(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_shard_t *shard, ngx_uint_t max)
{
    static time_t      logged;
    static ngx_uint_t  quiet;

    if (logged == ngx_time()) {
        quiet++;
        return;
    }

    ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                  "idempotency fence \"%V\" mysql=%V: %ui fences in flight "
                  "(a quarter of its connections, pool=): epoch %ui of key "
                  "%V is left undecided, and %ui more since the last such "
                  "line",
                  &ctx->conf->fence->name, &shard->name, max, ctx->epoch,
                  &ctx->key_id, quiet);

    logged = ngx_time();
    quiet = 0;
}


static void
ngx_http_idempotency_fence_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_ctx_t    *ctx;
    ngx_http_idempotency_fence_e   rc;

    ctx = op->data;
    ctx->fence.op = NULL;
    op->shard->fences--;

    rc = ngx_http_idempotency_fence_verdict(ctx, op);

    ctx->fence.next(ctx, rc);
}


static ngx_http_idempotency_fence_e
ngx_http_idempotency_fence_verdict(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op)
{
    ngx_int_t                      state;
    ngx_str_t                     *f;
    ngx_log_t                     *log;
    ngx_http_idempotency_store_t  *store;

    log = ctx->request->connection->log;
    store = ctx->conf->fence;
    f = op->fields;

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK || op->nrows == 0
        || op->nfields < 2)
    {
        /* a lock wait (the backend's transaction is open), a lost race
         * on Galera, the store: the next retry fences again */

        ngx_log_error(NGX_LOG_WARN, log, 0,
                      "idempotency fence \"%V\" table %V: epoch %ui of key "
                      "%V is undecided: %s%*s%s; the key stays unknown "
                      "until a retry decides it", &store->name,
                      &ctx->conf->fence_table, ctx->epoch, &ctx->key_id,
                      op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
                          ? "no marker row"
                          : op->rc == NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT
                          ? "timed out" : "the statement failed (",
                      op->err_text.len, op->err_text.data,
                      op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR
                      || op->rc == NGX_HTTP_IDEMPOTENCY_OP_DOWN
                      || op->rc == NGX_HTTP_IDEMPOTENCY_OP_BUSY ? ")" : "");

        return NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED;
    }

    state = ngx_http_idempotency_field_int(
                                &f[NGX_HTTP_IDEMPOTENCY_FENCE_F_STATE]);

    if (state == NGX_HTTP_IDEMPOTENCY_MARK_EXECUTED) {

        ngx_log_error(NGX_LOG_NOTICE, log, 0,
                      "idempotency fence \"%V\": epoch %ui of key %V was "
                      "executed by the backend: it is not executed again",
                      &store->name, ctx->epoch, &ctx->key_id);

        if (ngx_http_idempotency_fence_result(ctx,
                &f[NGX_HTTP_IDEMPOTENCY_FENCE_F_RESULT])
            != NGX_OK)
        {
            return NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED;
        }

        /* what the claim does with it (find, or record it) is its own */

        return NGX_HTTP_IDEMPOTENCY_FENCE_EXECUTED;
    }

    if (state != NGX_HTTP_IDEMPOTENCY_MARK_FENCED) {

        /* not a state of either writer's: never read as "fenced", which
         * would let the key run again */

        ngx_log_error(NGX_LOG_ERR, log, 0,
                      "idempotency fence \"%V\" table %V: the marker of "
                      "epoch %ui of key %V has state \"%V\", neither 1 "
                      "(executed) nor 2 (fenced): undecided, the key is "
                      "not run again", &store->name, &ctx->conf->fence_table,
                      ctx->epoch, &ctx->key_id,
                      &f[NGX_HTTP_IDEMPOTENCY_FENCE_F_STATE]);

        return NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED;
    }

    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "idempotency fence \"%V\": epoch %ui of key %V is "
                  "fenced: it can never commit, and the key may run again",
                  &store->name, ctx->epoch, &ctx->key_id);

    return NGX_HTTP_IDEMPOTENCY_FENCE_FENCED;
}


ngx_int_t
ngx_http_idempotency_fence_result(ngx_http_idempotency_ctx_t *ctx,
    ngx_str_t *result)
{
    u_char   *p;
    size_t    len;

    ngx_str_null(&ctx->fence.members);
    ngx_str_null(&ctx->fence.result);

    if (result->data == NULL || result->len == 0) {
        return NGX_OK;
    }

    len = ngx_min(result->len, NGX_HTTP_IDEMPOTENCY_RESULT_MAX);

    p = ngx_pnalloc(ctx->request->pool,
                    len + sizeof("\"result\":\"\"") + len
                    + ngx_escape_json(NULL, result->data, len));
    if (p == NULL) {
        return NGX_ERROR;
    }

    /* the reference as it is, for the row (fence_record()), then the
     * problem's member */

    ctx->fence.result.data = p;
    ctx->fence.result.len = len;
    p = ngx_cpymem(p, result->data, len);

    ctx->fence.members.data = p;

    p = ngx_cpymem(p, "\"result\":\"", 10);
    p = (u_char *) ngx_escape_json(p, result->data, len);
    *p++ = '"';

    ctx->fence.members.len = p - ctx->fence.members.data;

    return NGX_OK;
}


void
ngx_http_idempotency_fence_record(ngx_http_idempotency_ctx_t *ctx,
    ngx_msec_t live)
{
    ngx_http_idempotency_op_t  *op;

    op = ngx_http_idempotency_sql_executed(ctx->shard, ngx_cycle->log,
                                           ctx->key_hash, ctx->epoch,
                                           &ctx->fence.result, live);
    if (op == NULL) {
        return;
    }

    /* the marker stays the truth: a retry that finds the row unchanged
     * fences again and finds the marker again */

    ngx_http_idempotency_op_run(op);
    ngx_http_idempotency_op_detach(op);
}


/*
 * The request ends: a fence in flight commits or not without it
 * (autocommit: the marker is written or not, whoever waits), and counts
 * against the bound until it ends
 */

static void
ngx_http_idempotency_fence_end(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->fence.op) {
        ctx->fence.op->handler = ngx_http_idempotency_fence_gone;
        ctx->fence.op->data = NULL;
        ctx->fence.op = NULL;
    }
}


static void
ngx_http_idempotency_fence_gone(ngx_http_idempotency_op_t *op)
{
    op->shard->fences--;
}
