
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the claim a request holds.
 *
 *     UPDATE t SET state = 4, owner = <none>, lease_until = now, ...
 *      WHERE key_hash = ? AND state = 0 AND owner = ?
 *
 * A release is conditional on the owner token, so it never frees a row
 * that another request has taken over, or one that is completed.  The
 * row stays, free and nobody's, until its retention ends (the purge
 * removes it then): a renewal of the old owner that lands after it
 * changes nothing, and the next claim takes it over as a new operation,
 * with the next epoch.
 */


#include "ngx_http_idempotency_owner.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_ctx.h"


/*
 * A key to give back: its release is tried again, 250 ms doubling to
 * 2 s, until it succeeds or the lease has ended (a retry then takes the
 * key over anyway).  After a claim whose write may still be running on
 * the server (it timed out, or its connection was lost), the server's
 * thread that runs it is ended first, and the release waits until it is
 * gone: a release that ran before that write commits would leave the key
 * held.  It lives in memory of its own: the request may be gone.
 */

#define NGX_HTTP_IDEMPOTENCY_GIVEBACK_RELEASE  0
#define NGX_HTTP_IDEMPOTENCY_GIVEBACK_KILL    1
#define NGX_HTTP_IDEMPOTENCY_GIVEBACK_CHECK   2

typedef struct {
    ngx_http_idempotency_shard_t  *shard;
    ngx_msec_t                     until;
    ngx_msec_t                     delay;
    ngx_uint_t                     thread;    /* the write's, or 0 */
    ngx_uint_t                     step;      /* GIVEBACK_* */
    ngx_event_t                    retry;
    u_char                         key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                         token[NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];
} ngx_http_idempotency_giveback_t;


static ngx_http_idempotency_giveback_t *ngx_http_idempotency_giveback(
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_giveback_unsure(
    ngx_http_idempotency_giveback_t *g, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_giveback_run(ngx_event_t *ev);
static void ngx_http_idempotency_giveback_later(
    ngx_http_idempotency_giveback_t *g, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_giveback_done(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_orphan_done(ngx_http_idempotency_op_t *op);


void
ngx_http_idempotency_handed_over(ngx_http_idempotency_ctx_t *ctx)
{
    ctx->owner = 0;

    ngx_http_idempotency_lease_stop(&ctx->lease);
}


void
ngx_http_idempotency_owner_end(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_http_idempotency_lease_stop(&ctx->lease);

    ngx_http_idempotency_release(ctx, "request ended before it was sent "
                                      "upstream");
}


void
ngx_http_idempotency_release(ngx_http_idempotency_ctx_t *ctx,
    const char *why)
{
    ngx_http_idempotency_giveback_t  *g;

    if (!ctx->owner) {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idempotency: releasing key %V: %s", &ctx->key_id, why);

    ngx_http_idempotency_handed_over(ctx);

    g = ngx_http_idempotency_giveback(ctx);

    if (g) {
        ngx_http_idempotency_giveback_run(&g->retry);
    }
}


void
ngx_http_idempotency_release_unsure(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_giveback_t  *g;

    ngx_log_error(NGX_LOG_INFO, ctx->request->connection->log, 0,
                  "idempotency: the claim of key %V may have been written: "
                  "it is given back", &ctx->key_id);

    g = ngx_http_idempotency_giveback(ctx);

    if (g) {
        ngx_http_idempotency_giveback_unsure(g, op);
    }
}


/* the write's server thread, if the server may still run it, goes first */

static void
ngx_http_idempotency_giveback_unsure(ngx_http_idempotency_giveback_t *g,
    ngx_http_idempotency_op_t *op)
{
    if (op->thread) {
        g->thread = op->thread;
        g->step = NGX_HTTP_IDEMPOTENCY_GIVEBACK_KILL;
    }

    ngx_http_idempotency_giveback_run(&g->retry);
}


static ngx_http_idempotency_giveback_t *
ngx_http_idempotency_giveback(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_http_idempotency_giveback_t  *g;

    g = ngx_calloc(sizeof(ngx_http_idempotency_giveback_t), ngx_cycle->log);
    if (g == NULL) {
        return NULL;
    }

    g->shard = ctx->shard;
    g->until = ngx_current_msec + ctx->conf->lease;
    g->delay = 250;

    ngx_memcpy(g->key_hash, ctx->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    ngx_memcpy(g->token, ctx->token, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN);

    g->retry.handler = ngx_http_idempotency_giveback_run;
    g->retry.data = g;
    g->retry.log = ngx_cycle->log;

    /* not cancelable: a reload that dropped a pending give-back would
     * leave the key in progress, refused with 409, until its lease ends;
     * the retries stop at the lease anyway */

    return g;
}


static void
ngx_http_idempotency_giveback_run(ngx_event_t *ev)
{
    ngx_http_idempotency_op_t        *op;
    ngx_http_idempotency_giveback_t  *g;

    g = ev->data;

    switch (g->step) {

    case NGX_HTTP_IDEMPOTENCY_GIVEBACK_KILL:
        op = ngx_http_idempotency_sql_kill(g->shard, ngx_cycle->log,
                                           g->thread, 0);
        break;

    case NGX_HTTP_IDEMPOTENCY_GIVEBACK_CHECK:
        op = ngx_http_idempotency_sql_running(g->shard, ngx_cycle->log,
                                              g->thread);
        break;

    default: /* NGX_HTTP_IDEMPOTENCY_GIVEBACK_RELEASE */
        op = ngx_http_idempotency_sql_release(g->shard, ngx_cycle->log,
                                              g->key_hash, g->token);
        break;
    }

    if (op == NULL) {
        ngx_free(g);
        return;
    }

    op->handler = ngx_http_idempotency_giveback_done;
    op->data = g;

    ngx_http_idempotency_op_run(op);
}


static void
ngx_http_idempotency_giveback_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_giveback_t  *g;

    g = op->data;

    switch (g->step) {

    case NGX_HTTP_IDEMPOTENCY_GIVEBACK_KILL:

        /* ended now, or gone already ("unknown thread"): see it gone */

        if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
            || op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR)
        {
            g->step = NGX_HTTP_IDEMPOTENCY_GIVEBACK_CHECK;
            ngx_http_idempotency_giveback_run(&g->retry);
            return;
        }

        break;

    case NGX_HTTP_IDEMPOTENCY_GIVEBACK_CHECK:

        if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
            && ngx_http_idempotency_field_int(&op->fields[0]) == 0)
        {
            g->step = NGX_HTTP_IDEMPOTENCY_GIVEBACK_RELEASE;
            ngx_http_idempotency_giveback_run(&g->retry);
            return;
        }

        if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR) {
            /* no PROCESSLIST to look at: the release goes all the same */
            g->step = NGX_HTTP_IDEMPOTENCY_GIVEBACK_RELEASE;
            ngx_http_idempotency_giveback_run(&g->retry);
            return;
        }

        if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {
            /* still there: the KILL has not ended it yet */
            ngx_http_idempotency_giveback_later(g, NULL);
            return;
        }

        break;

    default: /* NGX_HTTP_IDEMPOTENCY_GIVEBACK_RELEASE */

        if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK) {
            ngx_free(g);
            return;
        }

        break;
    }

    ngx_http_idempotency_giveback_later(g, op);
}


/* the step once more, later, while the lease lasts */

static void
ngx_http_idempotency_giveback_later(ngx_http_idempotency_giveback_t *g,
    ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_shard_t  *shard;

    shard = g->shard;

    if ((ngx_msec_int_t) (g->until - ngx_current_msec - g->delay) > 0) {

        if (op) {
            ngx_log_error(NGX_LOG_WARN, op->log, 0,
                          "idempotency store \"%V\" mysql=%V: %s failed "
                          "(%ui%s%V), trying again", &shard->store->name,
                          &shard->name, op->name, op->rc,
                          op->err_text.len ? ": " : "", &op->err_text);
        }

        ngx_add_timer(&g->retry, g->delay);
        g->delay = ngx_min(2 * g->delay, 2000);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, ngx_cycle->log, 0,
                  "idempotency store \"%V\" mysql=%V: release failed: the "
                  "key stays in progress until its lease ends",
                  &shard->store->name, &shard->name);

    ngx_free(g);
}


void
ngx_http_idempotency_orphan(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_giveback_t  *g;

    /* without a token, nothing the request sent can have won */

    g = ctx->has_token ? ngx_http_idempotency_giveback(ctx) : NULL;

    if (g == NULL) {
        ngx_http_idempotency_op_detach(op);
        return;
    }

    op->handler = ngx_http_idempotency_orphan_done;
    op->data = g;
}


static void
ngx_http_idempotency_orphan_done(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_giveback_t  *g;

    g = op->data;

    /*
     * A READ tells whose the row is.  A write may have made it ours even
     * when it does not say so (a timeout, a lost connection, or 0 rows
     * from a batchable INSERT, which may have shared its statement with a
     * key that exists): the release expires the row only if it is ours
     * and in progress, so it is sent unless the write alone said no.
     */

    if (op->stmt == NGX_HTTP_IDEMPOTENCY_STMT_READ
        ? ngx_http_idempotency_sql_row_owned(op, g->token)
        : !(op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK && op->affected_rows == 0
            && op->batch == NULL))
    {
        if (op->stmt != NGX_HTTP_IDEMPOTENCY_STMT_READ
            && ngx_http_idempotency_op_unsure(op))
        {
            ngx_http_idempotency_giveback_unsure(g, op);
            return;
        }

        ngx_http_idempotency_giveback_run(&g->retry);
        return;
    }

    ngx_free(g);
}
