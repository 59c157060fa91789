
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the claim a request holds.
 *
 * From the moment a claim is won until the completion job takes it
 * over, the request owns the key (ctx->owner) and renews its lease.  It
 * hands it over, gives it back (release), or, when the request ends
 * while its claim is still in flight, leaves the claim to its op, which
 * gives the key back if the claim turns out to have won.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_OWNER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_OWNER_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_mysql.h"


/*
 * The request ends holding the key: nothing of it went upstream (the
 * capture's end would have recorded what did), so a retry runs it
 */
void ngx_http_idempotency_owner_end(ngx_http_idempotency_ctx_t *ctx);

/* gives the claim up (the key is free for a retry) */
void ngx_http_idempotency_release(ngx_http_idempotency_ctx_t *ctx,
    const char *why);

/*
 * A claim step that writes failed, and may have written all the same (a
 * timeout, a connection lost): the key is given back, if it is the
 * request's, as soon as a connection can say so.
 */
void ngx_http_idempotency_release_unsure(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op);

/* the claim is handed to a completion write: stop renewing the lease */
void ngx_http_idempotency_handed_over(ngx_http_idempotency_ctx_t *ctx);

/*
 * The request ends while the claim step op is in flight: the op goes on
 * without it, and gives the key back if the step made it the request's.
 */
void ngx_http_idempotency_orphan(ngx_http_idempotency_ctx_t *ctx,
    ngx_http_idempotency_op_t *op);


#endif /* _NGX_HTTP_IDEMPOTENCY_OWNER_H_INCLUDED_ */
