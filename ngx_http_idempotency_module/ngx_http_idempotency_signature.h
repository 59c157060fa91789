
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: webhook signatures checked before a claim
 * ("idempotency_signature").
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_SIGNATURE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_SIGNATURE_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


typedef struct ngx_http_idempotency_verify_s  ngx_http_idempotency_verify_t;


/*
 * "idempotency_signature standard|stripe|github|shopify
 *  secret_file=PATH ... [tolerance=TIME];" and "... off;"
 */
char *ngx_http_idempotency_signature_directive(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);

/*
 * The delivery's signature headers, read before the body: NGX_OK with *v,
 * ready to be fed the body; NGX_DECLINED with *why (missing, malformed,
 * a timestamp out of tolerance); NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_verify_start(ngx_http_request_t *r,
    ngx_http_idempotency_signer_t *conf,
    ngx_http_idempotency_verify_t **v, ngx_str_t *why);

/* a piece of the body (an ngx_http_idempotency_piece_pt) */
ngx_int_t ngx_http_idempotency_verify_update(void *v, u_char *p,
    size_t len);

/*
 * The body's end: NGX_OK when a signature of the header is the HMAC of
 * one of the secrets; NGX_DECLINED with *why; NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_verify_finish(ngx_http_idempotency_verify_t *v,
    ngx_str_t *why);


#endif /* _NGX_HTTP_IDEMPOTENCY_SIGNATURE_H_INCLUDED_ */
