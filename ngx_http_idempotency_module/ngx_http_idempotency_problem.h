
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: RFC 9457 problem responses.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_PROBLEM_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_PROBLEM_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


typedef enum {
    NGX_HTTP_IDEMPOTENCY_P_MISSING = 0,
    NGX_HTTP_IDEMPOTENCY_P_INVALID,
    NGX_HTTP_IDEMPOTENCY_P_MISMATCH,
    NGX_HTTP_IDEMPOTENCY_P_CONFLICT,
    NGX_HTTP_IDEMPOTENCY_P_UNSTORED,
    NGX_HTTP_IDEMPOTENCY_P_STORE,
    NGX_HTTP_IDEMPOTENCY_P_SCOPE,
    NGX_HTTP_IDEMPOTENCY_P_NOT_ISSUED,
    NGX_HTTP_IDEMPOTENCY_P_UNKNOWN,
    NGX_HTTP_IDEMPOTENCY_P_EXECUTED,    /* the backend's marker (fence.c) */
    NGX_HTTP_IDEMPOTENCY_P_EXHAUSTED,   /* no attempt came back (claim.c) */
    NGX_HTTP_IDEMPOTENCY_P_BODY,        /* no key in the body (keysrc.c) */
    NGX_HTTP_IDEMPOTENCY_P_SIGNATURE,   /* a webhook's (signature.c) */

    /* the operator API (admin.c) */
    NGX_HTTP_IDEMPOTENCY_P_ADMIN_REQUEST,
    NGX_HTTP_IDEMPOTENCY_P_ADMIN_METHOD,
    NGX_HTTP_IDEMPOTENCY_P_NOT_FOUND,
    NGX_HTTP_IDEMPOTENCY_P_CHANGED,
    NGX_HTTP_IDEMPOTENCY_P_NOT_APPLICABLE,

    NGX_HTTP_IDEMPOTENCY_NPROBLEMS      /* how many: no problem */
} ngx_http_idempotency_problem_e;


/*
 * Sends the problem response of the main request, with detail (NULL: the
 * type's; JSON-escaped here); retry_after > 0 adds Retry-After.  A
 * protected request's problem also says whether a retry can help, in the
 * headers that the common SDKs obey
 * (Stripe-Should-Retry, X-Should-Retry): "true" with a Retry-After,
 * "false" without.  members as for problem_ext() below.  Returns what
 * the output filters returned, for ngx_http_finalize_request().
 */
ngx_int_t ngx_http_idempotency_problem(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    time_t retry_after, ngx_str_t *members);

/*
 * The operator API's: without Retry-After and hints, with a detail of the
 * caller's instead of the type's (NULL: the type's; JSON-escaped here)
 * and more members (NULL: none): JSON text, "name":value pairs, put
 * after "detail".
 */
ngx_int_t ngx_http_idempotency_problem_ext(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    ngx_str_t *members);

/* NGX_ERROR (and an emerg line) if a problem lacks an entry of a table */
ngx_int_t ngx_http_idempotency_problem_check(ngx_log_t *log);

/* the $idempotency_status of a request refused with the problem */
ngx_uint_t ngx_http_idempotency_problem_status(
    ngx_http_idempotency_problem_e problem);

/*
 * Sends the headers out, then b (the whole body, last_buf set) or, with
 * b NULL, the end of an empty body; for ngx_http_finalize_request().
 */
ngx_int_t ngx_http_idempotency_send(ngx_http_request_t *r, ngx_buf_t *b);

/* b, a whole JSON body: 200 application/json, never kept by a cache */
ngx_int_t ngx_http_idempotency_send_json(ngx_http_request_t *r,
    ngx_buf_t *b);

/* a response header of the module's own; key and value outlive r */
ngx_int_t ngx_http_idempotency_add_header(ngx_http_request_t *r,
    ngx_str_t *key, ngx_str_t *value);


#endif /* _NGX_HTTP_IDEMPOTENCY_PROBLEM_H_INCLUDED_ */
