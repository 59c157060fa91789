
/*
 * ngx_http_idempotency_module: the capture filters.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_


#include "ngx_http_idempotency_ctx.h"


ngx_int_t ngx_http_idempotency_filter_init(ngx_conf_t *cf);

/* the request ends: the end of a response no longer waits */
void ngx_http_idempotency_filter_cleanup(ngx_http_idempotency_ctx_t *ctx);

/* the request ends, its client gone, before the response did: record
 * the key as executed, not stored */
void ngx_http_idempotency_filter_abandon(ngx_http_idempotency_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_ */
