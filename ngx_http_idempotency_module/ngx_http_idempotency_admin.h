
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: "idempotency_admin STORE;", the operator
 * API (a key's row, the keys in progress or of unknown outcome, and
 * releasing or forgetting a key), in JSON.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_ADMIN_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_ADMIN_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/* "idempotency_admin STORE;": the location's content handler */
char *ngx_http_idempotency_admin(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_IDEMPOTENCY_ADMIN_H_INCLUDED_ */
