
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: holding a duplicate of a key in progress.
 */


#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_hold.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_ctx.h"


/* held duplicates of this worker, by the first byte of the key hash */
#define NGX_HTTP_IDEMPOTENCY_WAITERS  256


static void ngx_http_idempotency_hold_end(ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_hold_enter(
    ngx_http_idempotency_ctx_t *ctx);
static void ngx_http_idempotency_hold_handler(ngx_event_t *ev);
static void ngx_http_idempotency_hold_leave(ngx_http_idempotency_ctx_t *ctx);


static ngx_queue_t  ngx_http_idempotency_waiters[NGX_HTTP_IDEMPOTENCY_WAITERS];
static ngx_uint_t   ngx_http_idempotency_waiters_ready;
static ngx_uint_t   ngx_http_idempotency_held_n;


ngx_int_t
ngx_http_idempotency_hold(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_next_pt next)
{
    ngx_msec_t  delay, left;

    left = ctx->wait_until - ngx_current_msec;

    if (!ctx->conf->wait || (ngx_msec_int_t) left <= 0) {
        return NGX_DECLINED;
    }

    if (ngx_http_idempotency_hold_enter(ctx) != NGX_OK) {
        return NGX_DECLINED;
    }

    /* MySQL is polled after 25 ms, doubling up to 500 ms */

    ctx->hold.poll_delay = ctx->hold.poll_delay
                           ? ngx_min(ctx->hold.poll_delay * 2, 500) : 25;
    delay = ngx_min(ctx->hold.poll_delay, left);

    ctx->state = NGX_HTTP_IDEMPOTENCY_S_HELD;
    ctx->next = next;
    ctx->hold.poll_at = ngx_current_msec + delay;

    ctx->wait_ev.handler = ngx_http_idempotency_hold_handler;
    ctx->wait_ev.data = ctx;
    ctx->wait_ev.log = ctx->request->connection->log;

    /* with a cache zone, a completion in another worker shows there */

    if (ctx->conf->store->cache) {
        delay = ngx_min(delay, NGX_HTTP_IDEMPOTENCY_HOLD_PEEK);
    }

    ngx_add_timer(&ctx->wait_ev, delay);

    return NGX_AGAIN;
}


/* into the waiter list, unless the worker holds as many as it may */

static ngx_int_t
ngx_http_idempotency_hold_enter(ngx_http_idempotency_ctx_t *ctx)
{
    time_t                             now;
    ngx_uint_t                         i;
    ngx_http_idempotency_main_conf_t  *imcf;

    static time_t                      logged;

    if (ctx->hold.held) {
        return NGX_OK;
    }

    if (ngx_http_idempotency_on_end(ctx, ngx_http_idempotency_hold_end)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!ngx_http_idempotency_waiters_ready) {
        for (i = 0; i < NGX_HTTP_IDEMPOTENCY_WAITERS; i++) {
            ngx_queue_init(&ngx_http_idempotency_waiters[i]);
        }

        ngx_http_idempotency_waiters_ready = 1;
    }

    imcf = ngx_http_get_module_main_conf(ctx->request,
                                         ngx_http_idempotency_module);

    /* each held duplicate is a connection and a timer: bounded */

    if (ngx_http_idempotency_held_n >= imcf->max_held) {
        now = ngx_time();

        if (now - logged >= 60) {
            ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                          "idempotency: %ui duplicates held, the "
                          "idempotency_max_held of this worker: more "
                          "get 409 at once", imcf->max_held);
            logged = now;
        }

        ngx_http_idempotency_metric(ctx->conf->store, held_refused);

        return NGX_DECLINED;
    }

    ngx_queue_insert_tail(&ngx_http_idempotency_waiters[ctx->key_hash[0]],
                          &ctx->hold.waiter);
    ctx->hold.held = 1;
    ngx_http_idempotency_held_n++;
    ctx->conf->store->held++;

    return NGX_OK;
}


static void
ngx_http_idempotency_hold_handler(ngx_event_t *ev)
{
    ngx_msec_int_t               left;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ev->data;

    if (ctx->conf->store->cache
        && ngx_http_idempotency_tier_peek(ctx) == NGX_OK)
    {
        /* the owner completed in this nginx: the cache zone has it */
        ngx_http_idempotency_hold_leave(ctx);
        ctx->next(ctx, NGX_OK);
        return;
    }

    left = (ngx_msec_int_t) (ctx->hold.poll_at - ngx_current_msec);

    if (!ctx->hold.woken && left > 0) {
        ngx_add_timer(&ctx->wait_ev,
                      ngx_min((ngx_msec_t) left,
                              NGX_HTTP_IDEMPOTENCY_HOLD_PEEK));
        return;
    }

    /* time to poll, or woken by the owner's end: MySQL has the verdict */

    ctx->hold.woken = 0;
    ngx_http_idempotency_hold_leave(ctx);
    ctx->next(ctx, NGX_DECLINED);
}


void
ngx_http_idempotency_hold_wake(ngx_http_idempotency_store_t *store,
    u_char *key_hash)
{
    ngx_queue_t                 *head, *q;
    ngx_http_idempotency_ctx_t  *ctx;

    if (!ngx_http_idempotency_waiters_ready) {
        return;
    }

    head = &ngx_http_idempotency_waiters[key_hash[0]];

    /* only posts events: the list does not change while it is walked */

    for (q = ngx_queue_head(head);
         q != ngx_queue_sentinel(head);
         q = ngx_queue_next(q))
    {
        ctx = ngx_queue_data(q, ngx_http_idempotency_ctx_t, hold.waiter);

        if (ctx->conf->store != store
            || ctx->state != NGX_HTTP_IDEMPOTENCY_S_HELD
            || ngx_memcmp(ctx->key_hash, key_hash,
                          NGX_HTTP_IDEMPOTENCY_HASH_LEN)
               != 0)
        {
            continue;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "idempotency: held duplicate of key %V woken",
                       &ctx->key_id);

        ctx->hold.woken = 1;

        if (ctx->wait_ev.timer_set) {
            ngx_del_timer(&ctx->wait_ev);
        }

        if (!ctx->wait_ev.posted) {
            ngx_post_event(&ctx->wait_ev, &ngx_posted_events);
        }
    }
}


/* the request ends: out of the waiter list, its timer gone */

static void
ngx_http_idempotency_hold_end(ngx_http_idempotency_ctx_t *ctx)
{
    ngx_http_idempotency_hold_leave(ctx);

    if (ctx->wait_ev.timer_set) {
        ngx_del_timer(&ctx->wait_ev);
    }

    if (ctx->wait_ev.posted) {
        ngx_delete_posted_event(&ctx->wait_ev);
    }
}


static void
ngx_http_idempotency_hold_leave(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->hold.held) {
        ngx_queue_remove(&ctx->hold.waiter);
        ctx->hold.held = 0;
        ngx_http_idempotency_held_n--;
        ctx->conf->store->held--;
    }
}
