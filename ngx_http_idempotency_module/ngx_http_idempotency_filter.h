
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the capture filters.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_


#include "ngx_http_idempotency_ctx.h"


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

/* the request ends: the end of a response no longer waits */
void ngx_http_idempotency_filter_cleanup(ngx_http_idempotency_ctx_t *ctx);

/*
 * The request ends without a complete response after it was sent
 * upstream: the key is recorded as of unknown outcome (or released, as
 * idempotency_on_unknown_outcome says): NGX_OK when a write records it.
 */
ngx_int_t ngx_http_idempotency_filter_unsure(ngx_http_idempotency_ctx_t *ctx,
    const char *why);


#endif /* _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_ */
