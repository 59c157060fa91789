
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the shared-memory replay cache
 * ("cache=ZONE:SIZE" of idempotency_store).
 *
 * One zone per store, shared by all workers of one nginx: an rbtree of
 * completed entries (entry.h) keyed by key hash and an LRU queue for
 * eviction.  The zone outlives a reload.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_CACHE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_CACHE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/*
 * Tier counters of a store, in the metrics zone (metrics.h), since the
 * last start (a reload keeps them).  Updated without a lock; a reader
 * sees each counter, not a consistent set.
 */
typedef struct {
    ngx_atomic_t    shm_hits;        /* replays served from the zone */
    ngx_atomic_t    shm_misses;      /* lookups that found nothing usable */
    ngx_atomic_t    shm_stores;      /* entries written */
    ngx_atomic_t    shm_evictions;   /* live entries pushed out (LRU) */
    ngx_atomic_t    shm_expired;     /* entries dropped past retention */
    ngx_atomic_t    shm_skipped;     /* entries too large for the zone */

    ngx_atomic_t    redis_hits;      /* replays served from Redis */
    ngx_atomic_t    redis_misses;    /* lookups that found nothing usable */
    ngx_atomic_t    redis_errors;    /* lookups failed, timed out, skipped
                                        while Redis was down */
    ngx_atomic_t    redis_bad;       /* values not readable as an entry
                                        (counted in misses too) */
    ngx_atomic_t    redis_stores;    /* SETs sent */

    ngx_atomic_t    mysql_replays;   /* replays served by MySQL */
} ngx_http_idempotency_counters_t;


/* parses "ZONE:SIZE" and adds the zone to the store */
char *ngx_http_idempotency_cache_add(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value);

/*
 * A live entry of key_hash, copied into a new pool (*pool, which the
 * caller destroys): NGX_OK, or NGX_DECLINED.  *expires is the entry's
 * end of retention.
 */
ngx_int_t ngx_http_idempotency_cache_get(ngx_shm_zone_t *zone,
    u_char *key_hash, ngx_log_t *log, ngx_pool_t **pool, ngx_str_t *entry,
    time_t *expires);

/* stores (or replaces) the entry of key_hash; never fails a request */
void ngx_http_idempotency_cache_put(ngx_shm_zone_t *zone, u_char *key_hash,
    time_t expires, u_char *entry, size_t len);

/* removes the entry of key_hash: NGX_OK, or NGX_DECLINED if none */
ngx_int_t ngx_http_idempotency_cache_delete(ngx_shm_zone_t *zone,
    u_char *key_hash);

typedef struct {
    size_t          size;
    size_t          used;
    ngx_uint_t      entries;
} ngx_http_idempotency_cache_stats_t;


/* the zone's size, bytes in use, entries: NGX_OK, or NGX_DECLINED */
ngx_int_t ngx_http_idempotency_cache_stats(ngx_shm_zone_t *zone,
    ngx_http_idempotency_cache_stats_t *st);

/* the store's tier counters (metrics.h), NULL before the zone exists */
#define ngx_http_idempotency_counters(store)                                 \
    ((store)->metrics ? &(store)->metrics->tiers : NULL)

#define ngx_http_idempotency_count(counters, name)                           \
    if (counters) {                                                          \
        (void) ngx_atomic_fetch_add(&(counters)->name, 1);                   \
    }


#endif /* _NGX_HTTP_IDEMPOTENCY_CACHE_H_INCLUDED_ */
