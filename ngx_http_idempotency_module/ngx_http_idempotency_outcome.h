
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: what nginx knows of the upstream.
 *
 * When a forwarded request's response is not the upstream's own (nginx
 * made an error page, or error_page replaced it), or when the request
 * ends without a complete response, the request's upstream attempts
 * (r->upstream_states, kept across internal redirects) tell whether the
 * backend can have executed it.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_OUTCOME_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_OUTCOME_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/* the response that passes the header filter now */
#define NGX_HTTP_IDEMPOTENCY_ANSWERED     0   /* the backend's, to keep */
#define NGX_HTTP_IDEMPOTENCY_NOT_SENT     1   /* no byte reached it */
#define NGX_HTTP_IDEMPOTENCY_UNSURE       2   /* sent, no answer back */
#define NGX_HTTP_IDEMPOTENCY_REPLACED     3   /* it answered *status;
                                                 nginx sends a page */


/*
 * The response whose header passes now: a live upstream's, a location's
 * own (nothing was sent upstream, and it is not one of nginx's error
 * pages), or nginx's in place of the backend's.
 */
ngx_uint_t ngx_http_idempotency_outcome(ngx_http_request_t *r,
    ngx_uint_t *status);

/* the request ends without a complete response: NOT_SENT or UNSURE */
ngx_uint_t ngx_http_idempotency_outcome_sent(ngx_http_request_t *r);

/*
 * 1: an attempt that nginx gave up took a byte of the request and had no
 * answer; it may have executed, and no other may run it again.
 */
ngx_uint_t ngx_http_idempotency_outcome_lost(ngx_http_request_t *r);

/*
 * 1: the response's last buffer passes, and the FastCGI server closed
 * the connection before it ended the request: the answer may be cut.
 */
ngx_uint_t ngx_http_idempotency_outcome_cut(ngx_http_request_t *r);

/* finds nginx's FastCGI module among the modules of the configuration */
void ngx_http_idempotency_outcome_init(ngx_conf_t *cf);


#endif /* _NGX_HTTP_IDEMPOTENCY_OUTCOME_H_INCLUDED_ */
