
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: what nginx knows of the upstream.
 *
 * An attempt's state says whether the upstream answered (its header was
 * parsed: header_time is set) and how many bytes of the request the
 * connection took (bytes_sent, recorded when nginx gave the attempt up
 * or finalized it).  An attempt that took no byte cannot have executed:
 * a refused or timed out connect, a connection that failed before the
 * request went out.  Any other attempt without an answer may have.
 */


#include "ngx_http_idempotency_outcome.h"


/* the FastCGI module's index in r->ctx, or -1 without it */
static ngx_int_t  ngx_http_idempotency_fastcgi_ctx = -1;


ngx_uint_t
ngx_http_idempotency_outcome(ngx_http_request_t *r, ngx_uint_t *status)
{
    ngx_uint_t                  i, sent, replaced;
    ngx_http_upstream_t        *u;
    ngx_http_upstream_state_t  *st;

    /*
     * An attempt that was sent and got no answer may have executed, and
     * another answered after it: nginx gave the request to a server of a
     * peer that resend.c cannot wrap (a proxy_pass with variables).  The
     * answer may be of a second execution.
     */

    if (ngx_http_idempotency_outcome_lost(r)) {
        return NGX_HTTP_IDEMPOTENCY_UNSURE;
    }

    u = r->upstream;

    /*
     * A live upstream sends its own response (ngx_http_upstream's
     * send_response): its header was parsed, and it is not finalized.
     * Failover included: the upstream of the location an error_page or
     * try_files led to answers just the same.
     */

    if (u && u->cleanup && u->state
        && u->state->header_time != (ngx_msec_t) -1)
    {
        return NGX_HTTP_IDEMPOTENCY_ANSWERED;
    }

    /* the upstream answered with X-Accel-Redirect: what nginx sends in
     * its stead is the answer it asked for */

    if (u && u->headers_in.x_accel_redirect && r->err_status == 0) {
        return NGX_HTTP_IDEMPOTENCY_ANSWERED;
    }

    if (r->upstream_states == NULL || r->upstream_states->nelts == 0) {

        /*
         * Nothing went upstream: the location answered itself (return,
         * a static file).  One of nginx's error pages is not an answer
         * of anything that executed.
         */

        return (r->err_status >= NGX_HTTP_BAD_REQUEST)
               ? NGX_HTTP_IDEMPOTENCY_NOT_SENT
               : NGX_HTTP_IDEMPOTENCY_ANSWERED;
    }

    /*
     * The response is nginx's: what did the attempts get?  One that was
     * sent and got no answer makes the outcome unknown, whatever another
     * answered; one that answered, with none unsure, was replaced.  The
     * states without a peer are nginx's separators between the upstreams
     * of an internal redirect.
     */

    st = r->upstream_states->elts;
    sent = 0;
    replaced = 0;

    for (i = 0; i < r->upstream_states->nelts; i++) {

        if (st[i].peer == NULL) {
            continue;
        }

        if (st[i].header_time != (ngx_msec_t) -1 && st[i].status) {
            replaced = st[i].status;

        } else if (st[i].bytes_sent > 0) {
            sent = 1;
        }
    }

    if (sent) {
        return NGX_HTTP_IDEMPOTENCY_UNSURE;
    }

    if (replaced) {
        *status = replaced;
        return NGX_HTTP_IDEMPOTENCY_REPLACED;
    }

    return NGX_HTTP_IDEMPOTENCY_NOT_SENT;
}


ngx_uint_t
ngx_http_idempotency_outcome_sent(ngx_http_request_t *r)
{
    ngx_uint_t                  i;
    ngx_http_upstream_t        *u;
    ngx_http_upstream_state_t  *st;

    u = r->upstream;

    /* an attempt still connected has not recorded its bytes yet */

    if (u && u->peer.connection && u->peer.connection->sent > 0) {
        return NGX_HTTP_IDEMPOTENCY_UNSURE;
    }

    if (r->upstream_states == NULL) {
        /* no upstream: a content handler of nginx's stopped */
        return NGX_HTTP_IDEMPOTENCY_NOT_SENT;
    }

    st = r->upstream_states->elts;

    for (i = 0; i < r->upstream_states->nelts; i++) {
        if (st[i].peer
            && (st[i].bytes_sent > 0
                || st[i].header_time != (ngx_msec_t) -1))
        {
            return NGX_HTTP_IDEMPOTENCY_UNSURE;
        }
    }

    return NGX_HTTP_IDEMPOTENCY_NOT_SENT;
}


ngx_uint_t
ngx_http_idempotency_outcome_lost(ngx_http_request_t *r)
{
    ngx_uint_t                  i;
    ngx_http_upstream_state_t  *st;

    if (r->upstream_states == NULL) {
        return 0;
    }

    /* an attempt's bytes are recorded when nginx gives it up */

    st = r->upstream_states->elts;

    for (i = 0; i < r->upstream_states->nelts; i++) {
        if (st[i].peer
            && st[i].bytes_sent > 0
            && st[i].header_time == (ngx_msec_t) -1)
        {
            return 1;
        }
    }

    return 0;
}


/*
 * FastCGI ends an answer with its own records (an empty FCGI_STDOUT, then
 * FCGI_END_REQUEST), and nginx's FastCGI module notes either as the end:
 * p->upstream_done when it buffers, u->length 0 when it does not.  Without
 * fastcgi_keep_conn, or without buffering, nginx also takes a plain close
 * of the connection for the end, and passes on what came as the whole
 * answer: a server whose worker dies mid-answer after it read the whole
 * request (uWSGI's FastCGI socket) closes cleanly.  The FastCGI module
 * sets its context for every request it serves.
 */

ngx_uint_t
ngx_http_idempotency_outcome_cut(ngx_http_request_t *r)
{
    ngx_http_upstream_t  *u;

    u = r->upstream;

    if (u == NULL
        || ngx_http_idempotency_fastcgi_ctx < 0
        || r->ctx[ngx_http_idempotency_fastcgi_ctx] == NULL)
    {
        return 0;
    }

    /* no body was read, or fastcgi_cache answered: no end to miss */

    if (r->header_only) {
        return 0;
    }

#if (NGX_HTTP_CACHE)
    if (r->cached) {
        return 0;
    }
#endif

    if (u->buffering) {
        return u->pipe && !u->pipe->upstream_done;
    }

    return u->length != 0;
}


/* by name: a dynamic module cannot link to a module nginx may lack */

void
ngx_http_idempotency_outcome_init(ngx_conf_t *cf)
{
    ngx_uint_t  i;

    ngx_http_idempotency_fastcgi_ctx = -1;

    for (i = 0; cf->cycle->modules[i]; i++) {
        if (cf->cycle->modules[i]->type == NGX_HTTP_MODULE
            && ngx_strcmp(cf->cycle->modules[i]->name,
                          "ngx_http_fastcgi_module") == 0)
        {
            ngx_http_idempotency_fastcgi_ctx =
                                     cf->cycle->modules[i]->ctx_index;
            return;
        }
    }
}
