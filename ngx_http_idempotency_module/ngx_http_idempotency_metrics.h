
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the metrics zone and its counters.
 *
 * One shared-memory zone per nginx, made whenever a store is defined,
 * holds a block of counters per store, found again by the store's name
 * after a reload, so that counters survive it.  Counters are atomic
 * increments; gauges (connections, keys in progress, held duplicates)
 * are each worker's own values, published into its slot once a second
 * and summed when the metrics are read.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_METRICS_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_METRICS_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_cache.h"


/* store operations, by kind (op->kind, and the Redis ones) */
typedef enum {
    NGX_HTTP_IDEMPOTENCY_OP_OTHER = 0,     /* not counted */
    NGX_HTTP_IDEMPOTENCY_OP_CLAIM,
    NGX_HTTP_IDEMPOTENCY_OP_RENEW,
    NGX_HTTP_IDEMPOTENCY_OP_COMPLETE,
    NGX_HTTP_IDEMPOTENCY_OP_RELEASE,
    NGX_HTTP_IDEMPOTENCY_OP_PURGE,
    NGX_HTTP_IDEMPOTENCY_OP_REDIS_GET,
    NGX_HTTP_IDEMPOTENCY_OP_REDIS_SET,
    NGX_HTTP_IDEMPOTENCY_OP_READ,          /* a claim's SELECT */
    NGX_HTTP_IDEMPOTENCY_OP_TAKEOVER,      /* a claim's UPDATE */

    NGX_HTTP_IDEMPOTENCY_NOPS              /* how many: no kind */
} ngx_http_idempotency_op_kind_e;

#define NGX_HTTP_IDEMPOTENCY_NBUCKETS      12   /* the last is +Inf */
#define NGX_HTTP_IDEMPOTENCY_MAX_WORKERS   64   /* more share the last */


/* one worker's view of one MySQL server */
typedef struct {
    ngx_atomic_t                    pid;      /* 0: never published */
    ngx_atomic_t                    up;
    ngx_atomic_t                    idle;
    ngx_atomic_t                    busy;
    ngx_atomic_t                    queued;
} ngx_http_idempotency_conns_slot_t;


/* one worker's gauges of one store */
typedef struct {
    ngx_atomic_t                    pid;      /* 0: never published */
    ngx_atomic_t                    in_progress;
    ngx_atomic_t                    held;
    ngx_atomic_t                    redis_up;
} ngx_http_idempotency_worker_slot_t;


typedef struct ngx_http_idempotency_metrics_s  ngx_http_idempotency_metrics_t;

struct ngx_http_idempotency_metrics_s {
    ngx_queue_t                     queue;    /* of the zone's blocks */
    ngx_str_t                       name;     /* the store's, in the zone */
    ngx_uint_t                      nservers;

    ngx_atomic_t          requests[NGX_HTTP_IDEMPOTENCY_NSTATUSES];
    ngx_atomic_t          replays[NGX_HTTP_IDEMPOTENCY_NTIERS];
    ngx_atomic_t          ops[NGX_HTTP_IDEMPOTENCY_NOPS][2];  /* ok, error */
    ngx_atomic_t          op_buckets[NGX_HTTP_IDEMPOTENCY_NOPS]
                                    [NGX_HTTP_IDEMPOTENCY_NBUCKETS];
    ngx_atomic_t          op_msec[NGX_HTTP_IDEMPOTENCY_NOPS];

    ngx_atomic_t                    completion_retries;
    ngx_atomic_t                    lease_losses;
    ngx_atomic_t                    takeovers;
    ngx_atomic_t                    unstored;  /* executed, not stored */
    ngx_atomic_t                    purged_rows;
    ngx_atomic_t                    held_refused;
    ngx_atomic_t                    unknown;   /* outcomes recorded */
    ngx_atomic_t                    operator_releases;
    ngx_atomic_t                    operator_forgets;

    ngx_http_idempotency_counters_t   tiers;

    ngx_http_idempotency_worker_slot_t  worker[
                                       NGX_HTTP_IDEMPOTENCY_MAX_WORKERS];

    /* nservers times MAX_WORKERS slots, server by server */
    ngx_http_idempotency_conns_slot_t    pools[1];
};


/* adds the zone (postconfiguration), when the configuration has stores */
ngx_int_t ngx_http_idempotency_metrics_init(ngx_conf_t *cf);

/* a request ends: its $idempotency_status and $idempotency_tier */
void ngx_http_idempotency_metrics_request(
    ngx_http_idempotency_store_t *store, ngx_uint_t status, ngx_uint_t tier);

/* a store operation ended, ok or not, after ms milliseconds */
void ngx_http_idempotency_metrics_op(ngx_http_idempotency_store_t *store,
    ngx_uint_t kind, ngx_uint_t ok, ngx_msec_t ms);

/* this worker's slot in a store's block */
ngx_uint_t ngx_http_idempotency_metrics_slot(void);

/* the upper bounds of the op latency buckets, ms; the last is +Inf */
extern ngx_msec_t  ngx_http_idempotency_metrics_le[];


#define ngx_http_idempotency_metric(store, name)                             \
    if ((store)->metrics) {                                                  \
        (void) ngx_atomic_fetch_add(&(store)->metrics->name, 1);             \
    }

#define ngx_http_idempotency_metric_add(store, name, n)                      \
    if ((store)->metrics) {                                                  \
        (void) ngx_atomic_fetch_add(&(store)->metrics->name, n);             \
    }

#define ngx_http_idempotency_metric_set(store, name, v)                      \
    if ((store)->metrics) {                                                  \
        (store)->metrics->name = (v);                                        \
    }


#endif /* _NGX_HTTP_IDEMPOTENCY_METRICS_H_INCLUDED_ */
