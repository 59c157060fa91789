
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the request body, read once in pieces.
 *
 * The fingerprint, the key's body sources and a webhook's signature all
 * read the same body: one walk hands each piece to whoever needs it, so
 * that a body in a temp file is read once, a slice per event.
 */


#include "ngx_http_idempotency_body.h"


/* a slice takes about a millisecond to read and hash */
size_t  ngx_http_idempotency_hash_slice = 512 * 1024;


ngx_uint_t
ngx_http_idempotency_body_in_file(ngx_http_request_t *r)
{
    ngx_chain_t  *cl;

    cl = r->request_body ? r->request_body->bufs : NULL;

    for ( /* void */ ; cl; cl = cl->next) {
        if (cl->buf->in_file && !ngx_buf_in_memory(cl->buf)) {
            return 1;
        }
    }

    return 0;
}


size_t
ngx_http_idempotency_body_memory(ngx_http_request_t *r)
{
    size_t        size;
    ngx_chain_t  *cl;

    size = 0;

    for (cl = r->request_body ? r->request_body->bufs : NULL; cl;
         cl = cl->next)
    {
        if (ngx_buf_in_memory(cl->buf)) {
            size += cl->buf->last - cl->buf->pos;
        }
    }

    return size;
}


void
ngx_http_idempotency_walk_init(ngx_http_idempotency_walk_t *w,
    ngx_http_request_t *r, ngx_http_idempotency_piece_pt piece, void *data)
{
    w->cl = r->request_body ? r->request_body->bufs : NULL;
    w->offset = -1;
    w->piece = piece;
    w->data = data;
}


/*
 * A local file read, as nginx's own modules do without aio; a slice is
 * one read, so that a JSON string the reads cut is seldom cut (json.c:
 * yajl reads such a token again from its start)
 */

ngx_int_t
ngx_http_idempotency_walk(ngx_http_idempotency_walk_t *w)
{
    size_t      size, left;
    ssize_t     n;
    ngx_buf_t  *b;

    static u_char  buf[512 * 1024];

    left = ngx_http_idempotency_hash_slice;

    for ( /* void */ ; w->cl; w->cl = w->cl->next, w->offset = -1) {
        b = w->cl->buf;

        if (ngx_buf_in_memory(b)) {
            if (b->last > b->pos
                && w->piece(w->data, b->pos, b->last - b->pos) != NGX_OK)
            {
                return NGX_ERROR;
            }

            continue;
        }

        if (!b->in_file) {
            continue;
        }

        if (w->offset < 0) {
            w->offset = b->file_pos;
        }

        while (w->offset < b->file_last) {
            if (left == 0) {
                return NGX_AGAIN;
            }

            size = (size_t) ngx_min(b->file_last - w->offset,
                                    (off_t) ngx_min(sizeof(buf), left));

            n = ngx_read_file(b->file, buf, size, w->offset);

            if (n == NGX_ERROR || n == 0) {
                return NGX_ERROR;
            }

            if (w->piece(w->data, buf, n) != NGX_OK) {
                return NGX_ERROR;
            }

            w->offset += n;
            left -= ngx_min((size_t) n, left);
        }
    }

    return NGX_OK;
}
