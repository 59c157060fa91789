
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: fence or find (idempotency_fence).
 *
 * A backend that takes part marks its execution of a claim's epoch as the
 * first statement of its business transaction, with a row (key hash,
 * epoch, executed) in a marker table of its own database.  Before the
 * module gives up on an epoch (an unknown outcome, a dead owner's lease)
 * it inserts the same row as fenced: the database's lock on that one row
 * decides which of the two writers got there first, and each learns it.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_FENCE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_FENCE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"


/* what the marker of an epoch says */
typedef enum {
    NGX_HTTP_IDEMPOTENCY_FENCE_UNDECIDED = 0, /* lock wait, store error */
    NGX_HTTP_IDEMPOTENCY_FENCE_FENCED,        /* it can never commit */
    NGX_HTTP_IDEMPOTENCY_FENCE_EXECUTED       /* it committed */
} ngx_http_idempotency_fence_e;


/* where a fence goes on */
typedef void (*ngx_http_idempotency_fence_pt)(
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_fence_e rc);


/*
 * The fence's part of the request context (ctx->fence).  Embedded by the
 * context's header.
 */
typedef struct {
    ngx_http_idempotency_op_t         *op;        /* in flight */
    ngx_http_idempotency_fence_pt      next;
    ngx_str_t                          result;    /* the backend's */
    ngx_str_t                          members;   /* "result":"..." */
    u_char              marker[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
} ngx_http_idempotency_fence_ctx_t;



/* "idempotency_fence store [table=name] | off" */
char *ngx_http_idempotency_fence_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);

/*
 * Fences the epoch ctx->epoch of the key: next() is called with what the
 * marker says (the backend's result in ctx->fence.members when it ran),
 * later, or at once (undecided) when no op could be made.
 */
void ngx_http_idempotency_fence(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_fence_pt next);

/*
 * The key ran (its row says so, or its marker did): the backend's result
 * reference, kept (ctx->fence.result) and as the problem's members
 * (ctx->fence.members); and the row recorded so, on the claim's shard
 * (no answer awaited: the marker is the truth, the row saves the next
 * retry a fence), answered as in progress for live ms more
 */
ngx_int_t ngx_http_idempotency_fence_result(ngx_http_idempotency_ctx_t *ctx,
    ngx_str_t *result);
void ngx_http_idempotency_fence_record(ngx_http_idempotency_ctx_t *ctx,
    ngx_msec_t live);


#endif /* _NGX_HTTP_IDEMPOTENCY_FENCE_H_INCLUDED_ */
