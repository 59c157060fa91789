
/*
 * ngx_http_idempotency_module: the completion write.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_COMPLETE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_COMPLETE_H_INCLUDED_


#include "ngx_http_idempotency_handler.h"


/*
 * Takes the capture over (ctx->capture becomes NULL) and the claim with
 * it, and writes the record.  The request is told through
 * ngx_http_idempotency_filter_committed() once the write has ended,
 * unless it ended first.  NGX_ERROR: the key was released instead.
 */
ngx_int_t ngx_http_idempotency_complete(ngx_http_idempotency_ctx_t *ctx);

/* the request ends: the write goes on without it */
void ngx_http_idempotency_complete_detach(ngx_http_idempotency_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEMPOTENCY_COMPLETE_H_INCLUDED_ */
