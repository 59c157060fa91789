
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the request context.
 *
 * What a protected request carries on its way through the files of the
 * request path, and the small API they share: the context itself (also
 * after an internal redirect zeroed r->ctx), the outcome and the resumed
 * phases, the memory of a replay, the key's shard, and what runs when the
 * request ends (each step's own cleanup).  This file calls no other file
 * of the request path.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_CTX_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_CTX_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"
#include "ngx_http_idempotency_record.h"
#include "ngx_http_idempotency_entry.h"
#include "ngx_http_idempotency_redis.h"
#include "ngx_http_idempotency_lease.h"
#include "ngx_http_idempotency_key.h"


/* ctx->state: where the request is on its way to a decision */
#define NGX_HTTP_IDEMPOTENCY_S_BODY     1   /* reading the request body */
#define NGX_HTTP_IDEMPOTENCY_S_STORE    2   /* a tier or MySQL is asked */
#define NGX_HTTP_IDEMPOTENCY_S_HELD     3   /* held duplicate (hold.c) */
#define NGX_HTTP_IDEMPOTENCY_S_DECIDED  4   /* outcome known */
#define NGX_HTTP_IDEMPOTENCY_S_DONE     5   /* handled; never again */

/* the hex digits of the key hash that name a key in the error log */
#define NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN   8

/* ctx->outcome */
#define NGX_HTTP_IDEMPOTENCY_OUT_FORWARD  0
#define NGX_HTTP_IDEMPOTENCY_OUT_REPLAY   1
#define NGX_HTTP_IDEMPOTENCY_OUT_PROBLEM  2
#define NGX_HTTP_IDEMPOTENCY_OUT_ERROR    3   /* 500 */


/*
 * The parts of the context that one step owns, each declared in the
 * header of its file (which names the context by its type in module.h,
 * never including this header).
 */
#include "ngx_http_idempotency_keysrc.h"
#include "ngx_http_idempotency_claim.h"
#include "ngx_http_idempotency_hold.h"
#include "ngx_http_idempotency_filter.h"
#include "ngx_http_idempotency_fence.h"


struct ngx_http_idempotency_ctx_s {
    ngx_http_request_t                 *request;
    ngx_http_idempotency_loc_conf_t    *conf;
    ngx_http_idempotency_shard_t       *shard;

    ngx_str_t                           key;
    ngx_str_t                           key_id;     /* for the error log */
    ngx_uint_t                          status;     /* $idempotency_status */
    ngx_uint_t                          state;
    ngx_uint_t                          outcome;
    ngx_uint_t                          problem;
    ngx_str_t                           detail;     /* the problem's own */

    ngx_http_idempotency_source_ctx_t   source;     /* keysrc.c */
    ngx_http_idempotency_claim_ctx_t    claim;      /* claim.c */
    ngx_http_idempotency_hold_ctx_t     hold;       /* hold.c */
    ngx_http_idempotency_fence_ctx_t    fence;      /* fence.c */
    ngx_http_idempotency_lease_t        lease;
    ngx_uint_t                          epoch;      /* of the claim */
    ngx_msec_t                          wait_until;
    ngx_event_t                         wait_ev;    /* claim's, hold's */
    ngx_event_t                         resume_ev;

    ngx_pool_t                         *replay_pool;
    ngx_http_idempotency_record_t       record;

    /* replay tiers (tier.h) */
    ngx_uint_t                          tier;       /* $idempotency_tier */
    time_t                              expires;    /* owner: retention */
    ngx_http_idempotency_redis_op_t    *redis_op;   /* tier.c's lookup */
    ngx_http_idempotency_entry_t        entry;      /* tier hit */
    ngx_http_idempotency_next_pt        next;       /* lookup, hold */

    /* the response: its copy, and filter.c's watch over its sending */
    ngx_http_idempotency_capture_ctx_t  capture;
    ngx_http_idempotency_filter_ctx_t   filter;

    /* the completion write, and its memory, in capture.pool */
    void                               *job;
    void                               *reserve;

    unsigned                            owner:1;    /* holds the claim */
    unsigned                            has_token:1;
    unsigned                            has_life:1; /* life is the key's */
    unsigned                            expired_key:1; /* issued, expired */

    u_char                key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                key_id_data[NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN];
    u_char                fingerprint[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                token[NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];
    u_char                life[NGX_HTTP_IDEMPOTENCY_TOKEN_LEN];  /* fence.c */
};


/*
 * The context of a request that the module handles, in r->ctx and in a
 * cleanup of the request pool, which counts the request when it ends and
 * frees a replay's memory.
 */
ngx_http_idempotency_ctx_t *ngx_http_idempotency_ctx_create(
    ngx_http_request_t *r, ngx_http_idempotency_loc_conf_t *ilcf);

/*
 * Each step undoes itself: handler(ctx) runs when the request ends (a
 * cleanup of its pool), once however often it is asked for.  Cleanups run
 * in the reverse order of their first asking: a step asks when it starts
 * the work that must be undone, so the work started last is undone first
 * (the capture's outcome before the completion job lets the request go,
 * before the claim gives its key back).  NGX_ERROR: no memory, and the
 * step must not start.
 */
ngx_int_t ngx_http_idempotency_on_end(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_ctx_pt handler);

/* the context, also after an internal redirect zeroed r->ctx */
ngx_http_idempotency_ctx_t *ngx_http_idempotency_get_ctx(
    ngx_http_request_t *r);

/* the outcome is known: what the phase handler does when it resumes */
void ngx_http_idempotency_resolve(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t outcome,
    ngx_uint_t status);

/*
 * The request is answered with a problem of the module's own (a
 * ngx_http_idempotency_problem_e); $idempotency_status follows from it.
 */
void ngx_http_idempotency_refuse(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_uint_t problem);

/* runs the phases again, from a posted event */
void ngx_http_idempotency_resume(ngx_http_request_t *r);

/*
 * The one home of a replay's memory: the record a replay sends points
 * into pool, which the request now owns (a cache zone copy, a Redis or
 * a MySQL op's pool, each handed over by its *_take_pool()).
 */
void ngx_http_idempotency_replay_pool(ngx_http_idempotency_ctx_t *ctx,
    ngx_pool_t *pool);

/* the shard a key hash lives on */
ngx_http_idempotency_shard_t *ngx_http_idempotency_shard(
    ngx_http_idempotency_store_t *store, u_char *key_hash);


#endif /* _NGX_HTTP_IDEMPOTENCY_CTX_H_INCLUDED_ */
