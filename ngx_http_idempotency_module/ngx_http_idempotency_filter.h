
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the capture filters.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/*
 * The filters' parts of the request context, declared before the
 * context's header, which embeds them.  ctx->capture: the copy of the
 * response, in memory the module owns, which complete.c stores.
 */
typedef struct {
    ngx_pool_t                        *pool;
    size_t                            *charged;    /* in its cleanup */
    ngx_str_t                          head;
    ngx_chain_t                       *body;
    ngx_chain_t                       *tail;
    ngx_str_t                          trailers;   /* record.h's block */
    size_t                             body_len;
    off_t                              expect_len;
    ngx_uint_t                         status;     /* the response's */

    unsigned                           active:1;   /* the body is copied */
    unsigned                           seen:1;     /* its header, once */
    unsigned                           too_large:1;
} ngx_http_idempotency_capture_ctx_t;

/*
 * ctx->filter: the end of the response waiting for the completion write,
 * the guard after an internal redirect, a client not reading.
 */
typedef struct {
    ngx_http_event_handler_pt          downstream; /* it wraps it */
    ngx_chain_t                       *deferred;   /* end of response */
    ngx_event_t                        defer_ev;
    ngx_event_t                        guard_ev;
    ngx_event_t                        stall_ev;   /* a client not reading */
    off_t                              stall_sent; /* c->sent at its start */
    ngx_uint_t                         guards;     /* guard's looks */

    unsigned                           deferring:1; /* until committed */
    unsigned                           header_deferred:1; /* the header too */
    unsigned                           gone:1;     /* client unwritable */
} ngx_http_idempotency_filter_ctx_t;



ngx_int_t ngx_http_idempotency_filter_init(ngx_conf_t *cf);

/* after an internal redirect: the new location's upstream, once it is
 * started, ignores the client's abort for this request */
void ngx_http_idempotency_filter_guard(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);

/*
 * An owner's request is about to be forwarded: the memory that records
 * its outcome, whatever memory is left later (NGX_ERROR: none now).
 */
ngx_int_t ngx_http_idempotency_capture_prepare(
    ngx_http_idempotency_ctx_t *ctx);

/*
 * The request ends without a complete response after it was sent
 * upstream: the key is recorded as of unknown outcome (or released, as
 * idempotency_on_unknown_outcome says): NGX_OK when a write records it.
 */
ngx_int_t ngx_http_idempotency_filter_unsure(ngx_http_idempotency_ctx_t *ctx,
    const char *why);


#endif /* _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_ */
