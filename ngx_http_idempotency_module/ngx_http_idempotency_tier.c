
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the replay tiers in front of MySQL.
 *
 * Consistency rests on two rules.  A tier only ever holds a completed
 * row, and a completed row never changes until its retention ends, so a
 * tier entry is as good as the row while it lives.  And an entry lives
 * no longer than the row's retention: its expiry (and its Redis TTL) is
 * the retention MySQL reported, counted down.  Anything a tier cannot
 * vouch for (unreadable, another format, a fingerprint it does not know)
 * is a miss, and MySQL answers.
 *
 * Redis is written by others too.  An entry's tag binds it to its key,
 * its store and its epoch; what the tag cannot say is whether the entry
 * is still current: an old entry of a key that an operator forgot since
 * verifies as well as it did.  The one thing that knows here without a
 * MySQL round trip is the cache zone: a forget leaves a mark of the
 * forgotten epoch there, and a Redis entry no newer than what the zone
 * knows of the key is refused (docs/design.md, "Redis entries and
 * forget").
 */


#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_cache.h"
#include "ngx_http_idempotency_entry.h"
#include "ngx_http_idempotency_redis.h"
#include "ngx_http_idempotency_ctx.h"


static void ngx_http_idempotency_tier_end(ngx_http_idempotency_ctx_t *ctx);
static ngx_int_t ngx_http_idempotency_tier_shm(
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t count);
static void ngx_http_idempotency_tier_redis_done(
    ngx_http_idempotency_redis_op_t *op);
static time_t ngx_http_idempotency_tier_redis_expires(
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_redis_op_t *op);
static ngx_int_t ngx_http_idempotency_tier_redis_entry(
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_redis_op_t *op);
static void ngx_http_idempotency_tier_reject(ngx_http_idempotency_ctx_t *ctx,
    const char *why, size_t len);
static ngx_uint_t ngx_http_idempotency_tier_usable(
    ngx_http_idempotency_ctx_t *ctx);
static const char *ngx_http_idempotency_tier_stale(
    ngx_http_idempotency_ctx_t *ctx);
static time_t ngx_http_idempotency_tier_retention(
    ngx_http_idempotency_store_t *store);


ngx_int_t
ngx_http_idempotency_tier_lookup(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_next_pt next)
{
    ngx_http_idempotency_store_t     *store;
    ngx_http_idempotency_redis_op_t  *op;

    store = ctx->conf->store;

    if (store->cache && ngx_http_idempotency_tier_shm(ctx, 1) == NGX_OK) {
        return NGX_OK;
    }

    /* without a way to undo the lookup when the request ends, MySQL
     * answers */

    if (store->redis_name.len == 0
        || ngx_http_idempotency_on_end(ctx, ngx_http_idempotency_tier_end)
           != NGX_OK)
    {
        return NGX_DECLINED;
    }

    op = ngx_http_idempotency_redis_get(store, ctx->key_hash);
    if (op == NULL) {
        return NGX_DECLINED;
    }

    op->handler = ngx_http_idempotency_tier_redis_done;
    op->data = ctx;

    ctx->redis_op = op;
    ctx->next = next;

    return NGX_AGAIN;
}


static ngx_int_t
ngx_http_idempotency_tier_shm(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t count)
{
    time_t                            expires;
    ngx_int_t                         rc;
    ngx_str_t                         data;
    ngx_pool_t                       *pool;
    const char                       *why;
    ngx_http_request_t               *r;
    ngx_http_idempotency_store_t     *store;
    ngx_http_idempotency_counters_t  *counters;

    r = ctx->request;
    store = ctx->conf->store;
    counters = ngx_http_idempotency_counters(store);

    if (ngx_http_idempotency_cache_get(store->cache, ctx->key_hash,
                                       r->connection->log, &pool, &data,
                                       &expires)
        != NGX_OK)
    {
        if (count) {
            ngx_http_idempotency_count(counters, shm_misses);
        }

        return NGX_DECLINED;
    }

    rc = ngx_http_idempotency_entry_parse(pool, data.data, data.len,
                                          &ctx->entry, &why);

    if (rc == NGX_DECLINED) {
        /* written by the module before an upgrade, kept over a reload */
        goto miss;
    }

    if (rc != NGX_OK) {
        /* only this module writes the zone: a bug, not an attack */

        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idempotency store \"%V\": cache entry of key %V "
                      "is unreadable (%s), ignored",
                      &store->name, &ctx->key_id, why);
        goto miss;
    }

    ctx->entry.expires = expires;

    if ((ctx->entry.flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN)
        || !ngx_http_idempotency_tier_usable(ctx))
    {
        goto miss;
    }

    ngx_http_idempotency_replay_pool(ctx, pool);
    ctx->tier = NGX_HTTP_IDEMPOTENCY_TIER_SHM;

    ngx_http_idempotency_count(counters, shm_hits);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idempotency: key %V found in the cache zone",
                   &ctx->key_id);

    return NGX_OK;

miss:

    ngx_destroy_pool(pool);

    if (count) {
        ngx_http_idempotency_count(counters, shm_misses);
    }

    return NGX_DECLINED;
}


static void
ngx_http_idempotency_tier_redis_done(ngx_http_idempotency_redis_op_t *op)
{
    ngx_int_t                         rc;
    ngx_http_idempotency_ctx_t       *ctx;
    ngx_http_idempotency_store_t     *store;
    ngx_http_idempotency_counters_t  *counters;

    ctx = op->data;
    store = ctx->conf->store;
    counters = ngx_http_idempotency_counters(store);

    ctx->redis_op = NULL;

    rc = NGX_DECLINED;

    switch (op->rc) {

    case NGX_HTTP_IDEMPOTENCY_REDIS_OK:

        if (op->too_big) {
            ngx_http_idempotency_tier_reject(ctx, "over redis_max_entry",
                                             op->value.len);
            ngx_http_idempotency_count(counters, redis_misses);
            break;
        }

        if (op->value.data == NULL) {
            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                           "idempotency: key %V not in redis",
                           &ctx->key_id);

            ngx_http_idempotency_count(counters, redis_misses);
            break;
        }

        rc = ngx_http_idempotency_tier_redis_entry(ctx, op);

        if (rc == NGX_OK) {
            ngx_http_idempotency_count(counters, redis_hits);

        } else {
            ngx_http_idempotency_count(counters, redis_misses);
        }

        break;

    case NGX_HTTP_IDEMPOTENCY_REDIS_BAD:

        ngx_http_idempotency_tier_reject(ctx, "no string", 0);
        ngx_http_idempotency_count(counters, redis_misses);
        break;

    default:

        /* the outage itself is logged once, by the Redis client */

        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "idempotency: redis lookup of key %V failed (%ui)",
                       &ctx->key_id, op->rc);

        ngx_http_idempotency_count(counters, redis_errors);
        break;
    }

    ctx->next(ctx, rc);
}


/*
 * The end of retention by Redis' own clock (PTTL), which the writer's
 * clock cannot skew; the entry's own expiry only ever shortens it.  0: not
 * to be replayed.
 */

static time_t
ngx_http_idempotency_tier_redis_expires(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_redis_op_t *op)
{
    time_t  now, expires;

    now = ngx_time();
    expires = ctx->entry.expires;

    if (op->pttl == -2) {
        /* expired between the GET and the PTTL */
        return 0;
    }

    if (op->pttl == -1) {
        /* the module writes every entry with an expiry: one without
         * (SET without EX, PERSIST) was not written by it as it is */

        ngx_http_idempotency_tier_reject(ctx, "without expiry",
                                         op->value.len);
        return 0;
    }

    if (op->pttl >= 0) {
        expires = ngx_min(expires, now + (time_t) (op->pttl / 1000));
    }

    return (expires > now) ? expires : 0;
}


static ngx_int_t
ngx_http_idempotency_tier_redis_entry(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_redis_op_t *op)
{
    size_t                         len;
    time_t                         expires;
    ngx_int_t                      rc;
    const char                    *why;
    ngx_http_idempotency_store_t  *store;

    store = ctx->conf->store;

    /*
     * Whatever is not the module's own is never replayed: MySQL answers,
     * and its replay writes a good entry over it.  An entry of another
     * format version (an nginx not yet upgraded, or one before) is a
     * miss, not a value to warn of.  Then the tag, so that nothing of a
     * foreign value is parsed.
     */

    if (ngx_http_idempotency_entry_version(op->value.data, op->value.len)
        != NGX_OK
        && op->value.len >= sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC)
        && ngx_memcmp(op->value.data, NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC,
                      sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC) - 1)
           == 0)
    {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "idempotency: redis entry of key %V is of another "
                       "format version", &ctx->key_id);
        return NGX_DECLINED;
    }

    rc = ngx_http_idempotency_entry_verify(store, ctx->key_hash,
                                           op->value.data, op->value.len);

    if (rc != NGX_OK) {
        ngx_http_idempotency_tier_reject(ctx, rc == NGX_DECLINED
                                         ? "not signed with this store's "
                                           "secret for this key"
                                         : "not verifiable (OpenSSL failed)",
                                         op->value.len);
        return NGX_DECLINED;
    }

    len = op->value.len - NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN;

    rc = ngx_http_idempotency_entry_parse(op->pool, op->value.data, len,
                                          &ctx->entry, &why);

    if (rc != NGX_OK) {
        ngx_http_idempotency_tier_reject(ctx, why, op->value.len);
        return NGX_DECLINED;
    }

    if (ctx->entry.flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN) {
        /* the module keeps marks in the zone alone */
        ngx_http_idempotency_tier_reject(ctx, "a forgotten mark",
                                         op->value.len);
        return NGX_DECLINED;
    }

    why = ngx_http_idempotency_tier_stale(ctx);

    if (why) {
        ngx_http_idempotency_tier_reject(ctx, why, op->value.len);
        return NGX_DECLINED;
    }

    expires = ngx_http_idempotency_tier_redis_expires(ctx, op);

    if (expires == 0) {
        return NGX_DECLINED;
    }

    ctx->entry.expires = expires;

    if (!ngx_http_idempotency_tier_usable(ctx)) {
        return NGX_DECLINED;
    }

    /* later duplicates on this nginx find it in the zone */

    if (store->cache) {
        ngx_http_idempotency_cache_put(store->cache, ctx->key_hash, expires,
                                       op->value.data, len);
    }

    ngx_http_idempotency_replay_pool(ctx,
                                     ngx_http_idempotency_redis_take_pool(op));

    ctx->tier = NGX_HTTP_IDEMPOTENCY_TIER_REDIS;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idempotency: key %V found in redis", &ctx->key_id);

    return NGX_OK;
}


/*
 * A value in Redis that the module will not replay: counted, and logged
 * at most once a minute per worker (each request of a flood of planted
 * values would otherwise write a line), with how many went unlogged.
 */

static void
ngx_http_idempotency_tier_reject(ngx_http_idempotency_ctx_t *ctx,
    const char *why, size_t len)
{
    time_t                            now;
    ngx_http_idempotency_store_t     *store;
    ngx_http_idempotency_counters_t  *counters;

    store = ctx->conf->store;
    counters = ngx_http_idempotency_counters(store);

    ngx_http_idempotency_count(counters, redis_bad);

    now = ngx_time();

    if (store->redis_bad_logged && now - store->redis_bad_logged < 60) {
        store->redis_bad_quiet++;
        return;
    }

    ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                  "idempotency store \"%V\" redis=%V: value of key %V "
                  "ignored: %s (%uz bytes); %ui more ignored since the "
                  "last such line",
                  &store->name, &store->redis_name, &ctx->key_id, why, len,
                  store->redis_bad_quiet);

    store->redis_bad_logged = now;
    store->redis_bad_quiet = 0;
}


/*
 * A Redis entry that the cache zone knows to be past: the zone holds a
 * forgotten mark of its epoch or a later one, or an entry of a later
 * epoch (one the zone could not serve: its fingerprint unknown).  Only
 * the zone's header is read.
 */

static const char *
ngx_http_idempotency_tier_stale(ngx_http_idempotency_ctx_t *ctx)
{
    time_t                         expires;
    ngx_str_t                      data;
    ngx_pool_t                    *pool;
    ngx_uint_t                     epoch, flags, stale;
    ngx_http_idempotency_store_t  *store;

    store = ctx->conf->store;
    epoch = 0;
    flags = 0;

    if (store->cache == NULL
        || ngx_http_idempotency_cache_get(store->cache, ctx->key_hash,
                                          ctx->request->connection->log,
                                          &pool, &data, &expires)
           != NGX_OK)
    {
        return NULL;
    }

    stale = 0;

    if (ngx_http_idempotency_entry_peek(data.data, data.len, &epoch, &flags)
        == NGX_OK)
    {
        stale = (flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN)
                ? ctx->entry.epoch <= epoch : ctx->entry.epoch < epoch;
    }

    ngx_destroy_pool(pool);

    if (!stale) {
        return NULL;
    }

    return (flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN)
           ? "an entry of an epoch an operator forgot here"
           : "an entry of an epoch older than the cache zone's";
}


/*
 * An entry whose row fingerprint is unknown cannot say 422 or replay to
 * a request that compares fingerprints: MySQL has to.
 */

static ngx_uint_t
ngx_http_idempotency_tier_usable(ngx_http_idempotency_ctx_t *ctx)
{
    if (!ctx->conf->fingerprint
        || (ctx->entry.flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FP))
    {
        return 1;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "idempotency: tier entry of key %V has no "
                   "fingerprint, asking MySQL", &ctx->key_id);

    return 0;
}


void
ngx_http_idempotency_tier_put(ngx_http_idempotency_store_t *store,
    u_char *key_hash, ngx_uint_t flags, u_char *fingerprint, ngx_uint_t epoch,
    time_t expires, u_char *record, size_t len)
{
    void                            **secrets;
    u_char                           *data, *p;
    size_t                            size;
    time_t                            ttl;
    ngx_http_idempotency_counters_t  *counters;

    if (store->cache == NULL && store->redis_name.len == 0) {
        return;
    }

    /* whole seconds of retention left, as MySQL reported them */

    ttl = expires - ngx_time();

    if (ttl < 1) {
        return;
    }

    size = NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN + len;

    /* room for the tag that Redis' copy carries */

    data = ngx_alloc(size + NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN,
                     ngx_cycle->log);
    if (data == NULL) {
        return;
    }

    p = ngx_http_idempotency_entry_head(data,
                                        flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FP,
                                        fingerprint, ngx_max(epoch, 1),
                                        expires, len);
    ngx_memcpy(p, record, len);

    if (store->cache) {
        ngx_http_idempotency_cache_put(store->cache, key_hash, expires,
                                       data, size);
    }

    if (store->redis_name.len == 0) {
        ngx_free(data);
        return;
    }

    /* an entry that a lookup would refuse is not written */

    if (size + NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN > store->redis_max_entry) {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "idempotency: entry of %uz bytes not written to "
                       "redis (redis_max_entry %uz)",
                       size, store->redis_max_entry);
        ngx_free(data);
        return;
    }

    secrets = store->secrets->elts;

    if (ngx_http_idempotency_entry_sign(secrets[0], store, key_hash, data,
                                        size, data + size)
        != NGX_OK)
    {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "idempotency store \"%V\": HMAC-SHA256 failed, "
                      "entry not written to redis", &store->name);
        ngx_free(data);
        return;
    }

    size += NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN;

    if (ngx_http_idempotency_redis_set(store, key_hash, data, size, ttl)
        == NGX_OK)
    {
        counters = ngx_http_idempotency_counters(store);
        ngx_http_idempotency_count(counters, redis_stores);
    }

    ngx_free(data);
}


/*
 * Called once the row is gone or changed, not before: a duplicate that
 * read the row before then may still put the entry back (its replay
 * fills the tiers), which is the one way a forgotten response replays on
 * this nginx.  The zone's entry gives way to a forgotten mark of epoch
 * (0: unknown, the entry just goes), kept as long as an entry of that
 * epoch may live, so that its copy put back in Redis is refused here.
 */

ngx_int_t
ngx_http_idempotency_tier_forget(ngx_http_idempotency_store_t *store,
    u_char *key_hash, ngx_uint_t epoch)
{
    u_char  mark[NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN];
    time_t  expires;

    if (store->cache) {
        (void) ngx_http_idempotency_cache_delete(store->cache, key_hash);

        if (epoch && store->redis_name.len) {
            expires = ngx_time() + ngx_http_idempotency_tier_retention(store);

            (void) ngx_http_idempotency_entry_head(mark,
                                         NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN,
                                         NULL, epoch, expires, 0);

            ngx_http_idempotency_cache_put(store->cache, key_hash, expires,
                                           mark, sizeof(mark));
        }
    }

    if (store->redis_name.len == 0) {
        return NGX_OK;
    }

    return ngx_http_idempotency_redis_del(store, key_hash);
}


/* the longest idempotency_ttl of the locations that use the store */

static time_t
ngx_http_idempotency_tier_retention(ngx_http_idempotency_store_t *store)
{
    void                            ***loc;
    time_t                             ttl;
    ngx_uint_t                         i;
    ngx_http_idempotency_loc_conf_t   *ilcf;
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_idempotency_module);
    loc = imcf->locations.elts;
    ttl = 0;

    for (i = 0; i < imcf->locations.nelts; i++) {
        ilcf = loc[i][ngx_http_idempotency_module.ctx_index];

        if (ilcf->store == store) {
            ttl = ngx_max(ttl, ilcf->ttl);
        }
    }

    return ttl ? ttl : 86400;
}


ngx_int_t
ngx_http_idempotency_tier_peek(ngx_http_idempotency_ctx_t *ctx)
{
    return ngx_http_idempotency_tier_shm(ctx, 0);
}


/* the request ends: a Redis lookup in flight is detached */

static void
ngx_http_idempotency_tier_end(ngx_http_idempotency_ctx_t *ctx)
{
    if (ctx->redis_op) {
        ngx_http_idempotency_redis_detach(ctx->redis_op);
        ctx->redis_op = NULL;
    }
}
