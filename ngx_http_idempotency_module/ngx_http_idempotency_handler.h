
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


ngx_int_t ngx_http_idempotency_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_IDEMPOTENCY_HANDLER_H_INCLUDED_ */
