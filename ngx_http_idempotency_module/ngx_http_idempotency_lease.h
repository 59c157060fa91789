
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: keeping a claimed key's lease alive.
 *
 * The request that won a claim renews its lease while the upstream
 * works; the completion job renews it until its write is committed.
 * Renewals are urgent store operations: they go ahead of claims and
 * held duplicates' polls, so a busy pool never lets a live owner's
 * lease end.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_LEASE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_LEASE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"


typedef struct {
    ngx_http_idempotency_shard_t   *shard;
    ngx_str_t                      *key;        /* for the error log */
    u_char                         *key_hash;
    u_char                         *token;
    ngx_msec_t                      lease;
    ngx_msec_t                      renewed;    /* lease counts from */
    ngx_msec_t                      sent;       /* renewal in flight */
    ngx_log_t                      *log;
    ngx_http_idempotency_op_t      *op;         /* renewal in flight */
    ngx_event_t                     ev;

    unsigned                        failing:1;  /* logged once */
    unsigned                        lost:1;
    unsigned                        counted:1;  /* in store->in_progress */
    unsigned                        quiet:1;    /* a loss is not told */
} ngx_http_idempotency_lease_t;


/* renews every lease / 3 from now on; lease->renewed must be set */
void ngx_http_idempotency_lease_start(ngx_http_idempotency_lease_t *lease);

/* stops renewing; a renewal in flight ends on its own */
void ngx_http_idempotency_lease_stop(ngx_http_idempotency_lease_t *lease);


#endif /* _NGX_HTTP_IDEMPOTENCY_LEASE_H_INCLUDED_ */
