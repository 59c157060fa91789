
/*
 * ngx_http_idempotency_module: the replay tiers in front of MySQL.
 *
 * A duplicate is looked up in the store's shared-memory cache, then in
 * Redis, and only then claimed in MySQL, which alone decides claims.
 * The tiers hold completed responses only; they are filled when a
 * completion write succeeds and when MySQL serves a replay.  Held
 * duplicates (idempotency_wait) are woken by a completion in the same
 * worker and look into the cache zone between their polls of MySQL.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_TIER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_TIER_H_INCLUDED_


#include "ngx_http_idempotency_handler.h"


/* ctx->tier: where the verdict came from; $idempotency_tier */
#define NGX_HTTP_IDEMPOTENCY_TIER_NONE    0
#define NGX_HTTP_IDEMPOTENCY_TIER_SHM     1
#define NGX_HTTP_IDEMPOTENCY_TIER_REDIS   2
#define NGX_HTTP_IDEMPOTENCY_TIER_MYSQL   3

/* how often a held duplicate looks into the cache zone */
#define NGX_HTTP_IDEMPOTENCY_TIER_PEEK    10


/*
 * NGX_OK: the cache zone has a usable entry (ctx->entry, its memory in
 * ctx->replay_pool); NGX_AGAIN: Redis is being asked, and
 * ngx_http_idempotency_lookup_done() is called later; NGX_DECLINED: no
 * tier has the key, ask MySQL.
 */
ngx_int_t ngx_http_idempotency_tier_lookup(ngx_http_idempotency_ctx_t *ctx);

/*
 * A completed response, as the row holds it, into every tier: flags and
 * fingerprint as in entry.h, the record as a chain of memory buffers.
 */
void ngx_http_idempotency_tier_put(ngx_http_idempotency_store_t *store,
    u_char *key_hash, ngx_uint_t flags, u_char *fingerprint, time_t expires,
    ngx_chain_t *record, size_t len);

/*
 * A held duplicate: next poll of MySQL in delay ms; arms ctx->wait_ev.
 * NGX_DECLINED, and nothing armed, when the worker already holds
 * idempotency_max_held others.
 */
ngx_int_t ngx_http_idempotency_tier_hold(ngx_http_idempotency_ctx_t *ctx,
    ngx_msec_t delay);

/*
 * ctx->wait_ev fired: NGX_OK: the cache zone has the response now;
 * NGX_AGAIN: not yet, wait_ev is armed again; NGX_DECLINED: poll MySQL.
 */
ngx_int_t ngx_http_idempotency_tier_held(ngx_http_idempotency_ctx_t *ctx);

/* the key's owner in this worker is done: wake the held duplicates */
void ngx_http_idempotency_tier_wake(ngx_http_idempotency_store_t *store,
    u_char *key_hash);

/* the request ends */
void ngx_http_idempotency_tier_cleanup(ngx_http_idempotency_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEMPOTENCY_TIER_H_INCLUDED_ */
