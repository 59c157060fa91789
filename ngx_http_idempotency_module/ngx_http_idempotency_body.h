
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the request body, read once in pieces.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_BODY_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_BODY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* a piece of the body: NGX_OK, or NGX_ERROR to stop the walk */
typedef ngx_int_t (*ngx_http_idempotency_piece_pt)(void *data, u_char *p,
    size_t len);

/*
 * A walk over a read request body, each piece handed to piece(): a
 * buffer in memory whole, a temp file up to ngx_http_idempotency_hash_slice
 * bytes per call, so that a large body never stalls the worker.
 */
typedef struct {
    ngx_chain_t                      *cl;        /* the next buffer */
    off_t                             offset;    /* into cl's file, or -1 */
    ngx_http_idempotency_piece_pt     piece;
    void                             *data;
} ngx_http_idempotency_walk_t;

extern size_t  ngx_http_idempotency_hash_slice;


/* whether a part of the body is in a temp file (read across events) */
ngx_uint_t ngx_http_idempotency_body_in_file(ngx_http_request_t *r);

/* the bytes of the body in memory */
size_t ngx_http_idempotency_body_memory(ngx_http_request_t *r);

void ngx_http_idempotency_walk_init(ngx_http_idempotency_walk_t *w,
    ngx_http_request_t *r, ngx_http_idempotency_piece_pt piece, void *data);

/*
 * NGX_OK: the whole body was handed over; NGX_AGAIN: a slice of a temp
 * file was, call again (from a later event); NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_walk(ngx_http_idempotency_walk_t *w);


#endif /* _NGX_HTTP_IDEMPOTENCY_BODY_H_INCLUDED_ */
