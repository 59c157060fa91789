
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the precontent phase handler.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_HANDLER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_HANDLER_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_key.h"


/*
 * The handler's part of the request context (ctx->hash): the body's
 * fingerprint, taken a slice per event.  Declared before the context's
 * header, which embeds it.
 */
typedef struct {
    ngx_http_idempotency_fp_t          fp;
    ngx_event_t                        ev;         /* next body slice */
} ngx_http_idempotency_hash_ctx_t;


#include "ngx_http_idempotency_ctx.h"


ngx_int_t ngx_http_idempotency_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_IDEMPOTENCY_HANDLER_H_INCLUDED_ */
