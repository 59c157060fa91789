
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: nginx's own resends.
 *
 * nginx gives a request whose attempt failed to the next server, or to
 * the location an error_page names; it holds back only POST, LOCK and
 * PATCH once the request was sent.  For a request that holds a claim, an
 * attempt that took a byte of it and brought no answer back is an
 * unknown outcome whatever the method: it is never sent again.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_RESEND_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_RESEND_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/*
 * Postconfiguration, once every upstream{} has its peer.init (implicit
 * upstreams of "proxy_pass http://address" included): wraps them all.
 */
ngx_int_t ngx_http_idempotency_resend_init(ngx_conf_t *cf);

/*
 * An internal redirect of a claim's owner, in a location with a content
 * handler of its own: NGX_DECLINED, it may go on; NGX_DONE, an attempt
 * before it may have executed, and the request is answered with the
 * outcome-unknown problem.
 */
ngx_int_t ngx_http_idempotency_resend_guard(ngx_http_request_t *r,
    ngx_http_idempotency_ctx_t *ctx);


#endif /* _NGX_HTTP_IDEMPOTENCY_RESEND_H_INCLUDED_ */
