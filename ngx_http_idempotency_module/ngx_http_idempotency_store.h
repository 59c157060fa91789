
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the "idempotency_store" directive.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_STORE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_STORE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/* idempotency_store NAME parameter=value ...; */
char *ngx_http_idempotency_store_block(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/*
 * The store of that name, made (with its defaults) on first reference:
 * "idempotency" may name a store defined later in the file.
 */
ngx_http_idempotency_store_t *ngx_http_idempotency_find_store(ngx_conf_t *cf,
    ngx_str_t *name);

/*
 * A secret from a file: its first line, at most 4096 bytes, read at
 * configuration time; NGX_ERROR (logged) when there is none.
 */
ngx_int_t ngx_http_idempotency_read_secret(ngx_conf_t *cf, ngx_str_t *file,
    ngx_str_t *secret);


#endif /* _NGX_HTTP_IDEMPOTENCY_STORE_H_INCLUDED_ */
