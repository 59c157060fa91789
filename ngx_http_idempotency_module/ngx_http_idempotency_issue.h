
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: keys the server issues
 * ("idempotency_key_issuer", "idempotency_keys issued").
 *
 * A key is "ik1." base64url(128 random bits, u64 expiry) "."
 * base64url(HMAC-SHA256 under the store's secret of the domain
 * "idempotency-issued/1" and those 24 bytes): any nginx that holds the
 * secret can check it, with no state and no store round trip.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_ISSUE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_ISSUE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


#define NGX_HTTP_IDEMPOTENCY_KEYS_ANY     0
#define NGX_HTTP_IDEMPOTENCY_KEYS_ISSUED  1


/* "idempotency_key_issuer [ttl];" */
char *ngx_http_idempotency_key_issuer(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/*
 * A key this deployment issued and whose expiry has not passed: NGX_OK;
 * one it issued whose expiry has passed: NGX_ABORT (the expiry bounds its
 * first use only); NGX_DECLINED with *why; NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_issued(ngx_http_idempotency_store_t *store,
    ngx_str_t *key, const char **why);


#endif /* _NGX_HTTP_IDEMPOTENCY_ISSUE_H_INCLUDED_ */
