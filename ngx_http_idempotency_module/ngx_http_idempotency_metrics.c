
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the metrics zone and its counters.
 *
 * One shared-memory zone per nginx holds a block per store: counters
 * (atomic increments, by the drivers and the request path alike) and
 * the slots where each worker publishes its gauges.  A store finds its
 * block again by its name after a reload, so counters survive it.  The
 * page that reads them is prometheus.c.
 */


#include "ngx_http_idempotency_metrics.h"


#define NGX_HTTP_IDEMPOTENCY_METRICS_ZONE     (1024 * 1024)


typedef struct {
    ngx_queue_t                     blocks;
} ngx_http_idempotency_metrics_sh_t;


static ngx_int_t ngx_http_idempotency_metrics_init_zone(
    ngx_shm_zone_t *shm_zone, void *data);
static ngx_http_idempotency_metrics_t *ngx_http_idempotency_metrics_block(
    ngx_slab_pool_t *shpool, ngx_http_idempotency_metrics_sh_t *sh,
    ngx_http_idempotency_store_t *store);


static ngx_str_t  ngx_http_idempotency_metrics_zone_name =
    ngx_string("idempotency_metrics");

/* the upper bounds of the latency buckets, in ms; the last is +Inf */
ngx_msec_t  ngx_http_idempotency_metrics_le[] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_metrics_le,
                                 NGX_HTTP_IDEMPOTENCY_NBUCKETS - 1);


ngx_int_t
ngx_http_idempotency_metrics_init(ngx_conf_t *cf)
{
    ngx_shm_zone_t                    *zone;
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idempotency_module);

    if (imcf->stores.nelts == 0) {
        return NGX_OK;
    }

    zone = ngx_shared_memory_add(cf, &ngx_http_idempotency_metrics_zone_name,
                                 NGX_HTTP_IDEMPOTENCY_METRICS_ZONE,
                                 &ngx_http_idempotency_module);
    if (zone == NULL) {
        return NGX_ERROR;
    }

    zone->init = ngx_http_idempotency_metrics_init_zone;
    zone->data = imcf;

    return NGX_OK;
}


/*
 * Each store finds its block of the last configuration by its name (and
 * number of servers), so that a reload keeps its counters.
 */

static ngx_int_t
ngx_http_idempotency_metrics_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_uint_t                          i;
    ngx_slab_pool_t                    *shpool;
    ngx_http_idempotency_store_t      **stores;
    ngx_http_idempotency_main_conf_t   *imcf;
    ngx_http_idempotency_metrics_sh_t  *sh;

    imcf = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (data || shm_zone->shm.exists) {
        sh = shpool->data;

    } else {
        sh = ngx_slab_alloc(shpool, sizeof(ngx_http_idempotency_metrics_sh_t));
        if (sh == NULL) {
            return NGX_ERROR;
        }

        ngx_queue_init(&sh->blocks);
        shpool->data = sh;
    }

    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {
        stores[i]->metrics = ngx_http_idempotency_metrics_block(shpool, sh,
                                                                stores[i]);
        if (stores[i]->metrics == NULL) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "no room for the metrics of idempotency store "
                          "\"%V\" in the \"%V\" zone",
                          &stores[i]->name, &shm_zone->shm.name);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_http_idempotency_metrics_t *
ngx_http_idempotency_metrics_block(ngx_slab_pool_t *shpool,
    ngx_http_idempotency_metrics_sh_t *sh, ngx_http_idempotency_store_t *store)
{
    size_t                           size;
    ngx_uint_t                       n;
    ngx_queue_t                     *q;
    ngx_http_idempotency_metrics_t  *m;

    n = store->shards.nelts;

    for (q = ngx_queue_head(&sh->blocks);
         q != ngx_queue_sentinel(&sh->blocks);
         q = ngx_queue_next(q))
    {
        m = ngx_queue_data(q, ngx_http_idempotency_metrics_t, queue);

        if (m->nservers == n
            && m->name.len == store->name.len
            && ngx_strncmp(m->name.data, store->name.data, m->name.len) == 0)
        {
            return m;
        }
    }

    /* a new store, or one whose servers changed: counts from zero */

    size = sizeof(ngx_http_idempotency_metrics_t)
           + (n * NGX_HTTP_IDEMPOTENCY_MAX_WORKERS - 1)
             * sizeof(ngx_http_idempotency_conns_slot_t);

    m = ngx_slab_calloc(shpool, size);
    if (m == NULL) {
        return NULL;
    }

    m->name.data = ngx_slab_alloc(shpool, store->name.len);
    if (m->name.data == NULL) {
        ngx_slab_free(shpool, m);
        return NULL;
    }

    ngx_memcpy(m->name.data, store->name.data, store->name.len);
    m->name.len = store->name.len;
    m->nservers = n;

    ngx_queue_insert_tail(&sh->blocks, &m->queue);

    return m;
}


ngx_uint_t
ngx_http_idempotency_metrics_slot(void)
{
    return ngx_worker < NGX_HTTP_IDEMPOTENCY_MAX_WORKERS
           ? ngx_worker : NGX_HTTP_IDEMPOTENCY_MAX_WORKERS - 1;
}


void
ngx_http_idempotency_metrics_request(ngx_http_idempotency_store_t *store,
    ngx_uint_t status, ngx_uint_t tier)
{
    ngx_http_idempotency_metrics_t  *m;

    m = store->metrics;

    if (m == NULL || status >= NGX_HTTP_IDEMPOTENCY_NSTATUSES) {
        return;
    }

    (void) ngx_atomic_fetch_add(&m->requests[status], 1);

    if (status == NGX_HTTP_IDEMPOTENCY_REPLAY
        && tier < NGX_HTTP_IDEMPOTENCY_NTIERS)
    {
        (void) ngx_atomic_fetch_add(&m->replays[tier], 1);
    }
}


void
ngx_http_idempotency_metrics_op(ngx_http_idempotency_store_t *store,
    ngx_uint_t kind, ngx_uint_t ok, ngx_msec_t ms)
{
    ngx_uint_t                       i;
    ngx_http_idempotency_metrics_t  *m;

    m = store->metrics;

    if (m == NULL || kind == NGX_HTTP_IDEMPOTENCY_OP_OTHER
        || kind >= NGX_HTTP_IDEMPOTENCY_NOPS)
    {
        return;
    }

    for (i = 0; i < NGX_HTTP_IDEMPOTENCY_NBUCKETS - 1; i++) {
        if (ms <= ngx_http_idempotency_metrics_le[i]) {
            break;
        }
    }

    (void) ngx_atomic_fetch_add(&m->ops[kind][ok ? 0 : 1], 1);
    (void) ngx_atomic_fetch_add(&m->op_buckets[kind][i], 1);
    (void) ngx_atomic_fetch_add(&m->op_msec[kind], ms);
}
