
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: HMAC-SHA256 from the OpenSSL nginx links.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_HMAC_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_HMAC_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


#define NGX_HTTP_IDEMPOTENCY_HMAC_LEN  32


/*
 * A keyed context for secret, made once (at configuration time) and freed
 * with pool; each HMAC starts from a copy of it, so the key schedule is
 * not redone per message.  NULL: no memory, or no HMAC-SHA256.
 */
void *ngx_http_idempotency_hmac_key(ngx_pool_t *pool, ngx_str_t *secret);

/* a copy of key to feed one message into; NULL on failure */
void *ngx_http_idempotency_hmac_start(void *key);

ngx_int_t ngx_http_idempotency_hmac_update(void *h, u_char *p, size_t len);

/* the tag (NGX_HTTP_IDEMPOTENCY_HMAC_LEN bytes); h is freed either way */
ngx_int_t ngx_http_idempotency_hmac_finish(void *h, u_char *tag);

/* a copy given up before its end */
void ngx_http_idempotency_hmac_free(void *h);


#endif /* _NGX_HTTP_IDEMPOTENCY_HMAC_H_INCLUDED_ */
