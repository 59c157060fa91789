
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the replay tiers in front of MySQL.
 *
 * A duplicate is looked up in the store's shared-memory cache, then in
 * Redis, and only then claimed in MySQL, which alone decides claims.
 * The tiers hold completed responses only; they are filled when a
 * completion write succeeds and when MySQL serves a replay.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_TIER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_TIER_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/*
 * NGX_OK: the cache zone has a usable entry (ctx->entry, its memory kept
 * with ngx_http_idempotency_replay_pool()); NGX_AGAIN: Redis is being
 * asked, and next() is called with NGX_OK (a hit) or NGX_DECLINED;
 * NGX_DECLINED: no tier has the key, ask MySQL.
 */
ngx_int_t ngx_http_idempotency_tier_lookup(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_next_pt next);

/* the cache zone alone, not counted as a lookup: for held duplicates */
ngx_int_t ngx_http_idempotency_tier_peek(ngx_http_idempotency_ctx_t *ctx);

/*
 * A completed response, as the row holds it, into every tier: flags,
 * fingerprint and the row's epoch as in entry.h.
 */
void ngx_http_idempotency_tier_put(ngx_http_idempotency_store_t *store,
    u_char *key_hash, ngx_uint_t flags, u_char *fingerprint, ngx_uint_t epoch,
    time_t expires, u_char *record, size_t len);

/*
 * An operator forgot a completed key of epoch (0: not known): this
 * nginx's cache zone drops its entry and keeps a mark of the epoch
 * instead, Redis is sent a DEL.  NGX_DECLINED: the store has Redis and
 * the DEL was not sent (Redis is down); the entry lives until its TTL.
 */
ngx_int_t ngx_http_idempotency_tier_forget(
    ngx_http_idempotency_store_t *store, u_char *key_hash, ngx_uint_t epoch);


#endif /* _NGX_HTTP_IDEMPOTENCY_TIER_H_INCLUDED_ */
