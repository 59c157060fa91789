
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: from a known key to a verdict (tiers,
 * claim, verdict, hold).
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_CLAIM_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_CLAIM_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"


/*
 * The claim's part of the request context (ctx->claim).  Embedded by the
 * context's header.
 */
typedef struct {
    ngx_http_idempotency_op_t         *op;         /* claim in flight */
    ngx_msec_t                         sent;       /* claim sent at */
    ngx_uint_t                         tries;      /* claim steps */
    ngx_uint_t                         lost;       /* of them: 1213 */
    ngx_uint_t                         take;       /* READ said: TAKE_* */
    time_t                             take_ttl;   /* retention it said */
    ngx_uint_t                         state;      /* the row's, read */

    unsigned                           in_progress:1; /* seen so */
    unsigned                           exists:1;   /* its row seen */
    unsigned                           same:1;     /* its fingerprint */
} ngx_http_idempotency_claim_ctx_t;



/*
 * The key (and the body's fingerprint) is known: decides the request,
 * now or later, with ngx_http_idempotency_resolve() and resume().
 */
void ngx_http_idempotency_lookup(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEMPOTENCY_CLAIM_H_INCLUDED_ */
