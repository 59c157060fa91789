
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the request context.
 *
 * The context lives in the request's pool.  A cleanup of that pool holds
 * it too: nginx zeroes r->ctx on an internal redirect (named locations,
 * error_page), and the cleanup is how the context is found again, so
 * that a request claims at most once.  Each step that starts work the
 * request's end must undo (a claim in flight, a hold, a capture) adds a
 * cleanup of its own (ngx_http_idempotency_on_end()); the context's runs
 * last, as it was added first.
 */


#include "ngx_http_idempotency_ctx.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_metrics.h"


/* a step's cleanup: its handler, and the context it undoes for */
typedef struct {
    ngx_http_idempotency_ctx_t     *ctx;
    ngx_http_idempotency_ctx_pt     handler;
} ngx_http_idempotency_end_t;


static void ngx_http_idempotency_ctx_cleanup(void *data);
static void ngx_http_idempotency_end_handler(void *data);
static void ngx_http_idempotency_resume_handler(ngx_event_t *ev);


ngx_http_idempotency_ctx_t *
ngx_http_idempotency_ctx_create(ngx_http_request_t *r,
    ngx_http_idempotency_loc_conf_t *ilcf)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_idempotency_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_idempotency_ctx_cleanup;
    cln->data = ctx;

    ctx->request = r;
    ctx->conf = ilcf;
    ctx->status = NGX_HTTP_IDEMPOTENCY_BYPASS;
    ctx->state = NGX_HTTP_IDEMPOTENCY_S_DONE;

    ngx_http_set_ctx(r, ctx, ngx_http_idempotency_module);

    return ctx;
}


/* the request ends: it is counted, and the context's own work undone */

static void
ngx_http_idempotency_ctx_cleanup(void *data)
{
    ngx_http_idempotency_ctx_t  *ctx = data;

    ngx_http_idempotency_metrics_request(ctx->conf->store, ctx->status,
                                         ctx->tier);

    if (ctx->resume_ev.posted) {
        ngx_delete_posted_event(&ctx->resume_ev);
    }

    if (ctx->replay_pool) {
        ngx_destroy_pool(ctx->replay_pool);
        ctx->replay_pool = NULL;
    }
}


ngx_int_t
ngx_http_idempotency_on_end(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_ctx_pt handler)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_idempotency_end_t  *end;

    for (cln = ctx->request->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_idempotency_end_handler
            && ((ngx_http_idempotency_end_t *) cln->data)->handler == handler)
        {
            return NGX_OK;
        }
    }

    cln = ngx_pool_cleanup_add(ctx->request->pool,
                               sizeof(ngx_http_idempotency_end_t));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    end = cln->data;
    end->ctx = ctx;
    end->handler = handler;

    cln->handler = ngx_http_idempotency_end_handler;

    return NGX_OK;
}


static void
ngx_http_idempotency_end_handler(void *data)
{
    ngx_http_idempotency_end_t  *end = data;

    end->handler(end->ctx);
}


ngx_http_idempotency_ctx_t *
ngx_http_idempotency_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_idempotency_module);

    if (ctx || !(r->internal || r->error_page)) {
        return ctx;
    }

    /* an internal redirect zeroed r->ctx; the cleanup still has it */

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_idempotency_ctx_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_idempotency_module);
            return ctx;
        }
    }

    return NULL;
}


void
ngx_http_idempotency_resolve(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t outcome, ngx_uint_t status)
{
    ctx->outcome = outcome;
    ctx->status = status;
    ctx->state = NGX_HTTP_IDEMPOTENCY_S_DECIDED;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idempotency: outcome %ui, status %ui", outcome, status);
}


void
ngx_http_idempotency_refuse(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t problem)
{
    ctx->problem = problem;

    ngx_http_idempotency_resolve(r, ctx, NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM,
                                 ngx_http_idempotency_problem_status(problem));
}


void
ngx_http_idempotency_resume(ngx_http_request_t *r)
{
    ngx_http_idempotency_ctx_t  *ctx;

    /*
     * Resume from a posted event, not from inside the store op's handler:
     * finalizing the request here could free the op's pool (kept for a
     * replay) while the pool code still looks at the op.
     */

    ctx = ngx_http_idempotency_get_ctx(r);

    ctx->resume_ev.handler = ngx_http_idempotency_resume_handler;
    ctx->resume_ev.data = r;
    ctx->resume_ev.log = r->connection->log;

    ngx_post_event(&ctx->resume_ev, &ngx_posted_events);
}


static void
ngx_http_idempotency_resume_handler(ngx_event_t *ev)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ev->data;
    c = r->connection;

    r->read_event_handler = ngx_http_block_reading;
    r->write_event_handler = ngx_http_core_run_phases;

    ngx_http_core_run_phases(r);
    ngx_http_run_posted_requests(c);
}


void
ngx_http_idempotency_replay_pool(ngx_http_idempotency_ctx_t *ctx,
    ngx_pool_t *pool)
{
    if (ctx->replay_pool) {
        ngx_destroy_pool(ctx->replay_pool);
    }

    ctx->replay_pool = pool;
}


ngx_http_idempotency_shard_t *
ngx_http_idempotency_shard(ngx_http_idempotency_store_t *store,
    u_char *key_hash)
{
    uint32_t                       h;
    ngx_http_idempotency_shard_t  *shards;

    shards = store->shards.elts;

    if (store->shards.nelts == 1) {
        return &shards[0];
    }

    /* the first four bytes of the key hash, big-endian, modulo the
     * number of servers: stable for a given ordered server list */

    h = ngx_http_idempotency_get_be(key_hash, 4);

    return &shards[h % store->shards.nelts];
}
