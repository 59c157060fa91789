
/*
 * ngx_http_idempotency_module: from a known key to a verdict (tiers,
 * claim, verdict, hold), and the claim a request then holds.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_CLAIM_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_CLAIM_H_INCLUDED_


#include "ngx_http_idempotency_handler.h"


/*
 * The key (and the body's fingerprint) is known: decides the request,
 * now or later, with ngx_http_idempotency_resolve() and resume().
 */
void ngx_http_idempotency_lookup(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);

/* gives the claim up (the key is free for a retry) */
void ngx_http_idempotency_release(ngx_http_idempotency_ctx_t *ctx,
    const char *why);

/* the claim is handed to a completion write: stop renewing the lease */
void ngx_http_idempotency_handed_over(ngx_http_idempotency_ctx_t *ctx);

/*
 * The request ends: a claim in flight gives the key back if it wins; a
 * key still held is released, or, when the client left while it was
 * upstream, recorded as far as is known (filter.c) or left to its lease.
 */
void ngx_http_idempotency_claim_cleanup(ngx_http_idempotency_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEMPOTENCY_CLAIM_H_INCLUDED_ */
