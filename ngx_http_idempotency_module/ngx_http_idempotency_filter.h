
/*
 * ngx_http_idempotency_module: the capture filters.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


ngx_int_t ngx_http_idempotency_filter_init(ngx_conf_t *cf);


#endif /* _NGX_HTTP_IDEMPOTENCY_FILTER_H_INCLUDED_ */
