
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: background purge of expired rows.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_PURGE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_PURGE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


#define NGX_HTTP_IDEMPOTENCY_PURGE_INTERVAL  60000   /* purge= default */
#define NGX_HTTP_IDEMPOTENCY_PURGE_BATCH     1000    /* purge_batch= */


/* worker start: the first worker of each nginx purges every shard */
ngx_int_t ngx_http_idempotency_purge_init(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_IDEMPOTENCY_PURGE_H_INCLUDED_ */
