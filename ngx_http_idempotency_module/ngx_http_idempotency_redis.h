
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the Redis replay tier (hiredis' async API
 * on nginx events).
 *
 * Each worker keeps one connection per store, made on first use; every
 * operation is pipelined on it.  An "op" is one lookup (GETRANGE and
 * PTTL of a key), one store (SET ... EX) or one delete (DEL: an
 * operator forgot the key); each has its own deadline, redis_timeout.
 * While Redis is down the ops fail at once, so a request never waits for
 * a Redis that is known to be away.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_REDIS_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_REDIS_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/* op->rc */
#define NGX_HTTP_IDEMPOTENCY_REDIS_OK        0  /* answered: value or nil */
#define NGX_HTTP_IDEMPOTENCY_REDIS_ERROR     1  /* connection lost, refused */
#define NGX_HTTP_IDEMPOTENCY_REDIS_TIMEOUT   2
#define NGX_HTTP_IDEMPOTENCY_REDIS_DOWN      3  /* not tried: Redis is down */
#define NGX_HTTP_IDEMPOTENCY_REDIS_BAD       4  /* the key holds no string */


typedef struct ngx_http_idempotency_redis_op_s
    ngx_http_idempotency_redis_op_t;

typedef void (*ngx_http_idempotency_redis_handler_pt)(
    ngx_http_idempotency_redis_op_t *op);


struct ngx_http_idempotency_redis_op_s {
    /* called once, from a posted event, never from inside the library */
    ngx_http_idempotency_redis_handler_pt   handler;
    void                                   *data;

    /* results of a lookup */
    ngx_uint_t                              rc;
    ngx_str_t                               value;   /* data NULL: nil */
    ngx_pool_t                             *pool;    /* holds value; the
                                                        handler may take
                                                        it (set NULL) */
    int64_t                                 pttl;    /* ms, -1: none */
    ngx_msec_t                              started;
    unsigned                                too_big:1;  /* over
                                                        redis_max_entry;
                                                        value.len says
                                                        what came */

    /* private */
    void                                   *client;
    const char                             *name;
    ngx_queue_t                             queue;
    ngx_event_t                             timer;
    ngx_event_t                             done;
    ngx_uint_t                              replies;  /* still owed */
    ngx_uint_t                              got;
    unsigned                                lookup:1;
    unsigned                                finished:1;
    unsigned                                delivered:1;
};


/*
 * Looks the key up: GETRANGE of at most redis_max_entry + 1 bytes (a
 * value planted in Redis cannot make a worker read hundreds of MB) and
 * PTTL, pipelined.  An empty string is nil.  NULL on allocation
 * failure; otherwise the caller sets handler and data, and the handler
 * is always called later.
 */
ngx_http_idempotency_redis_op_t *ngx_http_idempotency_redis_get(
    ngx_http_idempotency_store_t *store, u_char *key_hash);

/* SET key entry EX ttl, fire and forget; NGX_DECLINED if not sent */
ngx_int_t ngx_http_idempotency_redis_set(ngx_http_idempotency_store_t *store,
    u_char *key_hash, u_char *entry, size_t len, time_t ttl);

/*
 * DEL key, fire and forget (an operator forgot the key); NGX_DECLINED if
 * not sent: Redis is down, and the entry lives until its TTL
 */
ngx_int_t ngx_http_idempotency_redis_del(ngx_http_idempotency_store_t *store,
    u_char *key_hash);

/* 0 while this worker has Redis down, else 1 (for metrics) */
ngx_uint_t ngx_http_idempotency_redis_up(ngx_http_idempotency_store_t *store);

/* the requester is gone: the op ends silently and frees itself */
void ngx_http_idempotency_redis_detach(ngx_http_idempotency_redis_op_t *op);

/* from the op's handler: its pool (the value) now belongs to the caller */
ngx_pool_t *ngx_http_idempotency_redis_take_pool(
    ngx_http_idempotency_redis_op_t *op);

/* worker exit: drop every op and connection */
void ngx_http_idempotency_redis_exit(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_IDEMPOTENCY_REDIS_H_INCLUDED_ */
