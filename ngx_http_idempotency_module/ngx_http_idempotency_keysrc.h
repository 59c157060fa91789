
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: what a request is known by: its key (the
 * header, or "idempotency_key"'s sources), the body read once for the
 * fingerprint, the key's body sources and the signature, and the hash of
 * scope and key.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_KEYSRC_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_KEYSRC_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_body.h"
#include "ngx_http_idempotency_key.h"
#include "ngx_http_idempotency_keyscan.h"
#include "ngx_http_idempotency_signature.h"



/*
 * The key's part of the request context (ctx->source): the walk over the
 * body, a slice per event, and what it feeds.  Embedded by the
 * context's header.
 */
typedef struct {
    ngx_http_idempotency_fp_t           fp;
    ngx_http_idempotency_walk_t         walk;
    ngx_event_t                         ev;        /* next body slice */
    ngx_http_idempotency_keyscan_t     *scan;      /* body sources */
    ngx_http_idempotency_verify_t      *verify;    /* the signature */
    ngx_str_t                          *parts;     /* by source */
    void                              (*known)(ngx_http_request_t *r,
                                               ngx_http_idempotency_ctx_t
                                                                      *ctx);
    unsigned                            unkeyed:1; /* checked, then passed
                                                      unprotected */
} ngx_http_idempotency_source_ctx_t;



/* where a request goes on once its key and fingerprint are known */
typedef void (*ngx_http_idempotency_known_pt)(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);


/* "idempotency_key source ... [max_body=size];", "idempotency_key header;" */
char *ngx_http_idempotency_key_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/*
 * The request's key, fingerprint and signature, reading the body when
 * one of them needs it; then known(), now or from a later event:
 * NGX_DONE.  NGX_DECLINED: no key, and none is required (nothing was
 * read); NGX_ABORT: a problem response is resolved; NGX_ERROR; or an
 * HTTP status, the body could not be read.
 */
ngx_int_t ngx_http_idempotency_identify(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx, ngx_http_idempotency_known_pt known);


#endif /* _NGX_HTTP_IDEMPOTENCY_KEYSRC_H_INCLUDED_ */
