
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: holding a duplicate of a key in progress.
 *
 * A duplicate that finds its key in progress elsewhere is held while its
 * idempotency_wait lasts instead of getting 409 at once.  It is woken by
 * the owner's completion in this worker, looks into the cache zone (which
 * a completion in another worker fills) every few milliseconds, and
 * polls MySQL with a growing delay.  The waiter list, its bound
 * (idempotency_max_held) and its timers all live here.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_HOLD_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_HOLD_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/*
 * The hold's part of the request context (ctx->hold).  Embedded by the
 * context's header.
 */
typedef struct {
    ngx_queue_t                        waiter;     /* held duplicate */
    ngx_msec_t                         poll_at;    /* held: next poll */
    ngx_msec_t                         poll_delay;

    unsigned                           held:1;     /* in the waiter list */
    unsigned                           woken:1;    /* by the owner's end */
} ngx_http_idempotency_hold_ctx_t;



/* how often a held duplicate looks into the cache zone, ms */
#define NGX_HTTP_IDEMPOTENCY_HOLD_PEEK    10


/*
 * NGX_AGAIN: held; next() is called once the wait ends, with NGX_OK when
 * the cache zone has the response (ctx->entry) and NGX_DECLINED when
 * MySQL is to be polled.  NGX_DECLINED: not held (no wait configured,
 * the wait is over, or the worker holds idempotency_max_held already).
 */
ngx_int_t ngx_http_idempotency_hold(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_next_pt next);

/* the key's owner in this worker is done: wake its held duplicates */
void ngx_http_idempotency_hold_wake(ngx_http_idempotency_store_t *store,
    u_char *key_hash);


#endif /* _NGX_HTTP_IDEMPOTENCY_HOLD_H_INCLUDED_ */
