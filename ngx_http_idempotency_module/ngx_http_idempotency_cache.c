
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the shared-memory replay cache.
 *
 * Entries are whole tier entries (entry.h), copied in and out under the
 * zone's lock: a reader never holds a pointer into the zone, so an entry
 * may be replaced or evicted at any time.  Only completed responses are
 * ever put here, each with the end of its key's retention, and a lookup
 * never returns an entry past it.  A full zone evicts the least recently
 * used entries; storing may fail, a request never does.
 */


#include "ngx_http_idempotency_cache.h"
#include "ngx_http_idempotency_metrics.h"


/* an entry may take at most this share of the zone */
#define NGX_HTTP_IDEMPOTENCY_CACHE_SHARE    4

/* expired entries dropped, from the LRU end, on each store */
#define NGX_HTTP_IDEMPOTENCY_CACHE_SWEEP    4

/*
 * Zone bytes per hash bucket: a small replay entry takes 300 or more,
 * so a full zone has at most about one entry per bucket.  A lookup reads
 * a bucket and its entries; a tree of as many entries took some 20 reads
 * from all over the zone, each a cache miss, and was the module's largest
 * cost in an nginx worker serving replays from the zone.
 */
#define NGX_HTTP_IDEMPOTENCY_CACHE_BUCKET   256


typedef struct ngx_http_idempotency_cache_node_s
    ngx_http_idempotency_cache_node_t;

typedef struct {
    ngx_queue_t                        lru;       /* most recent first */
    ngx_uint_t                         entries;
    ngx_uint_t                         nbuckets;
    ngx_http_idempotency_cache_node_t *buckets[1];
} ngx_http_idempotency_cache_sh_t;


typedef struct {
    ngx_http_idempotency_cache_sh_t   *sh;
    ngx_slab_pool_t                   *shpool;
    size_t                             max_entry;
    ngx_http_idempotency_store_t      *store;     /* its counters */
} ngx_http_idempotency_cache_t;


struct ngx_http_idempotency_cache_node_s {
    ngx_http_idempotency_cache_node_t *next;      /* in its bucket */
    ngx_queue_t                        queue;
    time_t                             expires;
    size_t                             len;
    u_char                   key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                             data[1];
};


static ngx_int_t ngx_http_idempotency_cache_init_zone(
    ngx_shm_zone_t *shm_zone, void *data);
static ngx_http_idempotency_cache_node_t *ngx_http_idempotency_cache_find(
    ngx_http_idempotency_cache_t *cache, u_char *key_hash);
static void ngx_http_idempotency_cache_drop(
    ngx_http_idempotency_cache_t *cache,
    ngx_http_idempotency_cache_node_t *cn);
static ngx_http_idempotency_cache_node_t **ngx_http_idempotency_cache_bucket(
    ngx_http_idempotency_cache_t *cache, u_char *key_hash);


char *
ngx_http_idempotency_cache_add(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value)
{
    u_char                        *p;
    ssize_t                        size;
    ngx_str_t                      name, s;
    ngx_shm_zone_t                *zone;
    ngx_http_idempotency_cache_t  *cache;

    p = ngx_strlchr(value->data, value->data + value->len, ':');

    if (p == NULL || p == value->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid \"cache=%V\" in \"idempotency_store\", "
                           "it must be ZONE:SIZE", value);
        return NGX_CONF_ERROR;
    }

    name.data = value->data;
    name.len = p - value->data;

    s.data = p + 1;
    s.len = value->data + value->len - s.data;

    size = ngx_parse_size(&s);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size in \"cache=%V\" of "
                           "\"idempotency_store\"", value);
        return NGX_CONF_ERROR;
    }

    if (size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" of \"idempotency_store\" is too "
                           "small, it must be at least %uz bytes",
                           &name, 8 * ngx_pagesize);
        return NGX_CONF_ERROR;
    }

    zone = ngx_shared_memory_add(cf, &name, size,
                                 &ngx_http_idempotency_module);
    if (zone == NULL) {
        return NGX_CONF_ERROR;
    }

    /* the key space is the store's: two stores must not share a zone */

    if (zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is already used by another "
                           "\"idempotency_store\"", &name);
        return NGX_CONF_ERROR;
    }

    cache = ngx_pcalloc(cf->pool, sizeof(ngx_http_idempotency_cache_t));
    if (cache == NULL) {
        return NGX_CONF_ERROR;
    }

    cache->max_entry = size / NGX_HTTP_IDEMPOTENCY_CACHE_SHARE;
    cache->store = store;

    zone->init = ngx_http_idempotency_cache_init_zone;
    zone->data = cache;

    store->cache = zone;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_idempotency_cache_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_idempotency_cache_t  *ocache = data;

    size_t                            len;
    ngx_uint_t                        n;
    ngx_slab_pool_t                  *shpool;
    ngx_http_idempotency_cache_t     *cache;
    ngx_http_idempotency_cache_sh_t  *sh;

    cache = shm_zone->data;

    if (ocache) {
        /* a reload with the same zone: the entries live on */
        cache->sh = ocache->sh;
        cache->shpool = ocache->shpool;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;
    cache->shpool = shpool;

    if (shm_zone->shm.exists) {
        cache->sh = shpool->data;
        return NGX_OK;
    }

    n = shm_zone->shm.size / NGX_HTTP_IDEMPOTENCY_CACHE_BUCKET;

    sh = ngx_slab_calloc(shpool, offsetof(ngx_http_idempotency_cache_sh_t,
                                          buckets)
                                 + n * sizeof(void *));
    if (sh == NULL) {
        return NGX_ERROR;
    }

    sh->entries = 0;
    sh->nbuckets = n;

    ngx_queue_init(&sh->lru);

    shpool->data = sh;
    cache->sh = sh;

    len = sizeof(" in idempotency cache zone \"\"") + shm_zone->shm.name.len;

    shpool->log_ctx = ngx_slab_alloc(shpool, len);
    if (shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(shpool->log_ctx, " in idempotency cache zone \"%V\"%Z",
                &shm_zone->shm.name);

    /* a full zone is normal: it evicts, and says so in the counters */
    shpool->log_nomem = 0;

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_cache_get(ngx_shm_zone_t *zone, u_char *key_hash,
    ngx_log_t *log, ngx_pool_t **pool, ngx_str_t *entry, time_t *expires)
{
    ngx_http_idempotency_counters_t    *counters;
    u_char                             *p;
    ngx_pool_t                         *tmp;
    ngx_http_idempotency_cache_t       *cache;
    ngx_http_idempotency_cache_node_t  *cn;

    cache = zone->data;
    counters = ngx_http_idempotency_counters(cache->store);

    ngx_shmtx_lock(&cache->shpool->mutex);

    cn = ngx_http_idempotency_cache_find(cache, key_hash);

    if (cn == NULL) {
        ngx_shmtx_unlock(&cache->shpool->mutex);
        return NGX_DECLINED;
    }

    if (cn->expires <= ngx_time()) {
        ngx_http_idempotency_cache_drop(cache, cn);
        ngx_http_idempotency_count(counters, shm_expired);
        ngx_shmtx_unlock(&cache->shpool->mutex);
        return NGX_DECLINED;
    }

    ngx_queue_remove(&cn->queue);
    ngx_queue_insert_head(&cache->sh->lru, &cn->queue);

    /* copied out: the entry may be evicted as soon as the lock is gone */

    tmp = ngx_create_pool(1024, log);
    p = tmp ? ngx_pnalloc(tmp, cn->len) : NULL;

    if (p == NULL) {
        ngx_shmtx_unlock(&cache->shpool->mutex);

        if (tmp) {
            ngx_destroy_pool(tmp);
        }

        return NGX_DECLINED;
    }

    ngx_memcpy(p, cn->data, cn->len);

    entry->data = p;
    entry->len = cn->len;
    *expires = cn->expires;

    ngx_shmtx_unlock(&cache->shpool->mutex);

    *pool = tmp;

    return NGX_OK;
}


void
ngx_http_idempotency_cache_put(ngx_shm_zone_t *zone, u_char *key_hash,
    time_t expires, u_char *entry, size_t len)
{
    ngx_http_idempotency_counters_t    *counters;
    time_t                              now;
    size_t                              size;
    ngx_uint_t                          n;
    ngx_queue_t                        *q;
    ngx_http_idempotency_cache_t       *cache;
    ngx_http_idempotency_cache_sh_t    *sh;
    ngx_http_idempotency_cache_node_t  *cn, *old, **bucket;

    cache = zone->data;
    counters = ngx_http_idempotency_counters(cache->store);
    sh = cache->sh;
    now = ngx_time();

    if (len > cache->max_entry || expires <= now) {
        ngx_http_idempotency_count(counters, shm_skipped);
        return;
    }

    size = offsetof(ngx_http_idempotency_cache_node_t, data) + len;

    ngx_shmtx_lock(&cache->shpool->mutex);

    old = ngx_http_idempotency_cache_find(cache, key_hash);

    if (old) {
        ngx_http_idempotency_cache_drop(cache, old);
    }

    /* a few expired entries go first, whatever their place in the LRU */

    for (n = 0; n < NGX_HTTP_IDEMPOTENCY_CACHE_SWEEP; n++) {
        if (ngx_queue_empty(&sh->lru)) {
            break;
        }

        q = ngx_queue_last(&sh->lru);
        cn = ngx_queue_data(q, ngx_http_idempotency_cache_node_t, queue);

        if (cn->expires > now) {
            break;
        }

        ngx_http_idempotency_cache_drop(cache, cn);
        ngx_http_idempotency_count(counters, shm_expired);
    }

    for ( ;; ) {
        cn = ngx_slab_alloc_locked(cache->shpool, size);

        if (cn || ngx_queue_empty(&sh->lru)) {
            break;
        }

        /* full: the least recently used entry makes room */

        q = ngx_queue_last(&sh->lru);
        old = ngx_queue_data(q, ngx_http_idempotency_cache_node_t, queue);

        if (old->expires > now) {
            ngx_http_idempotency_count(counters, shm_evictions);

        } else {
            ngx_http_idempotency_count(counters, shm_expired);
        }

        ngx_http_idempotency_cache_drop(cache, old);
    }

    if (cn == NULL) {
        ngx_shmtx_unlock(&cache->shpool->mutex);
        ngx_http_idempotency_count(counters, shm_skipped);
        return;
    }

    ngx_memcpy(cn->key_hash, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    cn->expires = expires;
    cn->len = len;
    ngx_memcpy(cn->data, entry, len);

    bucket = ngx_http_idempotency_cache_bucket(cache, key_hash);
    cn->next = *bucket;
    *bucket = cn;
    ngx_queue_insert_head(&sh->lru, &cn->queue);
    sh->entries++;

    ngx_shmtx_unlock(&cache->shpool->mutex);

    ngx_http_idempotency_count(counters, shm_stores);
}


/* an operator forgot the key (admin.c): its response must not replay */

ngx_int_t
ngx_http_idempotency_cache_delete(ngx_shm_zone_t *zone, u_char *key_hash)
{
    ngx_http_idempotency_cache_t       *cache;
    ngx_http_idempotency_cache_node_t  *cn;

    cache = zone->data;

    ngx_shmtx_lock(&cache->shpool->mutex);

    cn = ngx_http_idempotency_cache_find(cache, key_hash);

    if (cn) {
        ngx_http_idempotency_cache_drop(cache, cn);
    }

    ngx_shmtx_unlock(&cache->shpool->mutex);

    return cn ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_http_idempotency_cache_stats(ngx_shm_zone_t *zone,
    ngx_http_idempotency_cache_stats_t *st)
{
    ngx_http_idempotency_cache_t  *cache;

    cache = zone->data;

    if (cache->sh == NULL) {
        return NGX_DECLINED;
    }

    /* read without the lock: a scrape sees each number, not a set */

    st->size = zone->shm.size;
    st->used = zone->shm.size - cache->shpool->pfree * ngx_pagesize;
    st->entries = cache->sh->entries;

    return NGX_OK;
}


static ngx_http_idempotency_cache_node_t *
ngx_http_idempotency_cache_find(ngx_http_idempotency_cache_t *cache,
    u_char *key_hash)
{
    ngx_http_idempotency_cache_node_t  *cn;

    for (cn = *ngx_http_idempotency_cache_bucket(cache, key_hash);
         cn;
         cn = cn->next)
    {
        if (ngx_memcmp(cn->key_hash, key_hash,
                       NGX_HTTP_IDEMPOTENCY_HASH_LEN) == 0)
        {
            return cn;
        }
    }

    return NULL;
}


static void
ngx_http_idempotency_cache_drop(ngx_http_idempotency_cache_t *cache,
    ngx_http_idempotency_cache_node_t *cn)
{
    ngx_http_idempotency_cache_node_t  **p;

    for (p = ngx_http_idempotency_cache_bucket(cache, cn->key_hash);
         *p != cn;
         p = &(*p)->next)
    {
        /* void */
    }

    *p = cn->next;

    ngx_queue_remove(&cn->queue);
    ngx_slab_free_locked(cache->shpool, cn);
    cache->sh->entries--;
}


/* the key hash is SHA-256: its first bytes are as good as any */

static ngx_http_idempotency_cache_node_t **
ngx_http_idempotency_cache_bucket(ngx_http_idempotency_cache_t *cache,
    u_char *key_hash)
{
    ngx_uint_t  i, key;

    key = 0;

    for (i = 0; i < sizeof(ngx_uint_t); i++) {
        key = (key << 8) | key_hash[i];
    }

    return &cache->sh->buckets[key % cache->sh->nbuckets];
}
