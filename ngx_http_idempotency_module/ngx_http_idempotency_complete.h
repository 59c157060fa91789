
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the completion write.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_COMPLETE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_COMPLETE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/*
 * Takes the capture over (ctx->capture becomes NULL, if there is one) and
 * the claim with it, and writes the key's row in its final state: the
 * captured response (ROW_DONE; without one, or too large, ROW_UNSTORED),
 * ROW_UNSTORED, or ROW_UNKNOWN.  done() tells the request once the write
 * has ended, unless the request ended first.  It allocates nothing once
 * the job is reserved: a record it has no memory for is recorded as
 * executed, not stored.  NGX_ERROR: no job could be had (none reserved),
 * and the key was released instead.
 */
ngx_int_t ngx_http_idempotency_complete(ngx_http_idempotency_ctx_t *ctx,
    ngx_uint_t state, ngx_http_idempotency_ctx_pt done);

/*
 * Before the request goes upstream: the capture pool (created if there is
 * none) with the job that will record the outcome in it, so that nothing
 * need be allocated to record it once the request was sent.
 */
ngx_int_t ngx_http_idempotency_complete_reserve(
    ngx_http_idempotency_ctx_t *ctx);
void ngx_http_idempotency_complete_exit(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_IDEMPOTENCY_COMPLETE_H_INCLUDED_ */
