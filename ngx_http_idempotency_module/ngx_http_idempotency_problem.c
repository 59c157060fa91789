
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: RFC 9457 problem responses.
 */


#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_grpc.h"


/* the texts are the module's own; a detail is JSON-escaped when sent,
 * since the operator API's details may quote a client's argument */
typedef struct {
    ngx_uint_t   status;
    ngx_uint_t   variable;     /* $idempotency_status */
    ngx_str_t    type;
    ngx_str_t    title;
    ngx_str_t    detail;
    ngx_uint_t   hints;        /* a protected request's: should-retry */
} ngx_http_idempotency_problem_t;


#define NGX_HTTP_IDEMPOTENCY_TYPE  "urn:ngx-idempotency:problem:"


static ngx_int_t ngx_http_idempotency_problem_out(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    ngx_str_t *members, time_t retry_after, ngx_uint_t hints);
static ngx_int_t ngx_http_idempotency_problem_grpc(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    time_t retry_after);

static ngx_http_idempotency_problem_t  ngx_http_idempotency_problems[] = {

    [NGX_HTTP_IDEMPOTENCY_P_MISSING] = {
      NGX_HTTP_BAD_REQUEST, NGX_HTTP_IDEMPOTENCY_MISSING,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-missing"),
      ngx_string("Idempotency key missing"),
      ngx_string("This resource requires an idempotency key header."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_INVALID] = {
      NGX_HTTP_BAD_REQUEST, NGX_HTTP_IDEMPOTENCY_INVALID,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-invalid"),
      ngx_string("Idempotency key invalid"),
      ngx_string("The idempotency key header is malformed."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_MISMATCH] = {
      422, NGX_HTTP_IDEMPOTENCY_MISMATCH,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-reused"),
      ngx_string("Idempotency key reused"),
      ngx_string("This idempotency key was already used for a different "
                 "request (method, URI or body differ)."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_CONFLICT] = {
      NGX_HTTP_CONFLICT, NGX_HTTP_IDEMPOTENCY_CONFLICT,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "request-in-progress"),
      ngx_string("Request in progress"),
      ngx_string("A request with this idempotency key is still being "
                 "processed; retry later."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_UNSTORED] = {
      410, NGX_HTTP_IDEMPOTENCY_UNSTORED,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "response-not-stored"),
      ngx_string("Response not stored"),
      ngx_string("A request with this idempotency key was already "
                 "executed, but its response could not be stored; it is "
                 "not executed again."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_STORE] = {
      NGX_HTTP_SERVICE_UNAVAILABLE, NGX_HTTP_IDEMPOTENCY_ERROR,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "store-unavailable"),
      ngx_string("Idempotency store unavailable"),
      ngx_string("The idempotency key could not be checked; the request "
                 "was not executed.  Retry later."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_SCOPE] = {
      NGX_HTTP_BAD_REQUEST, NGX_HTTP_IDEMPOTENCY_NOSCOPE,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "scope-missing"),
      ngx_string("Idempotency scope missing"),
      ngx_string("The idempotency key cannot be scoped to a client for "
                 "this request (no identity); it was not executed."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_NOT_ISSUED] = {
      NGX_HTTP_BAD_REQUEST, NGX_HTTP_IDEMPOTENCY_INVALID,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-not-issued"),
      ngx_string("Idempotency key not issued"),
      ngx_string("This resource only accepts idempotency keys that this "
                 "server issued and that have not expired."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_UNKNOWN] = {
      NGX_HTTP_BAD_GATEWAY, NGX_HTTP_IDEMPOTENCY_UNKNOWN,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "outcome-unknown"),
      ngx_string("Outcome unknown"),
      ngx_string("A request with this idempotency key was sent to the "
                 "backend and no complete response came back: it may have "
                 "been executed.  It is not executed again until that is "
                 "known: an operator can tell and release the key, or, "
                 "where the backend takes part in the fence, a later "
                 "retry learns it."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_EXECUTED] = {
      410, NGX_HTTP_IDEMPOTENCY_UNSTORED,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "outcome-executed"),
      ngx_string("Executed, response lost"),
      ngx_string("A request with this idempotency key was executed: the "
                 "backend's own transaction recorded it, but its response "
                 "never came back.  It is not executed again; \"result\", "
                 "when present, is the backend's reference to what it "
                 "made."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_EXHAUSTED] = {
      NGX_HTTP_GATEWAY_TIME_OUT, NGX_HTTP_IDEMPOTENCY_EXHAUSTED,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "attempts-exhausted"),
      ngx_string("Attempts exhausted"),
      ngx_string("The operation with this idempotency key was attempted "
                 "as many times as this server allows, and no attempt "
                 "came back with an answer.  Where the backend takes part "
                 "in the fence, none of them was executed.  It is not "
                 "attempted again with this key."),
      1 },

    /* "idempotency_key": the detail names the source and what is wrong
     * ("json=data.object.id: not in the request body.") */

    [NGX_HTTP_IDEMPOTENCY_P_BODY] = {
      NGX_HTTP_BAD_REQUEST, NGX_HTTP_IDEMPOTENCY_INVALID,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-body-invalid"),
      ngx_string("Request body holds no idempotency key"),
      ngx_string("The request body is not what this resource reads its "
                 "idempotency key from (not JSON, or larger than it "
                 "reads); it was not executed."),
      1 },

    [NGX_HTTP_IDEMPOTENCY_P_SIGNATURE] = {
      NGX_HTTP_UNAUTHORIZED, NGX_HTTP_IDEMPOTENCY_UNVERIFIED,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "signature-invalid"),
      ngx_string("Signature invalid"),
      ngx_string("The request's signature does not hold; it was not "
                 "executed."),
      1 },

    /* the operator API (admin.c): most details are the caller's; no
     * protected request is refused with these */

    [NGX_HTTP_IDEMPOTENCY_P_ADMIN_REQUEST] = {
      NGX_HTTP_BAD_REQUEST, NGX_HTTP_IDEMPOTENCY_ERROR,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "admin-bad-request"),
      ngx_string("Bad operator request"),
      ngx_string("The request's arguments are not an operator API call."),
      0 },

    [NGX_HTTP_IDEMPOTENCY_P_ADMIN_METHOD] = {
      NGX_HTTP_NOT_ALLOWED, NGX_HTTP_IDEMPOTENCY_ERROR,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "admin-method-not-allowed"),
      ngx_string("Method not allowed"),
      ngx_string("The operator API answers GET and HEAD (inspect, list) "
                 "and POST (release, forget)."),
      0 },

    [NGX_HTTP_IDEMPOTENCY_P_NOT_FOUND] = {
      NGX_HTTP_NOT_FOUND, NGX_HTTP_IDEMPOTENCY_ERROR,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-not-found"),
      ngx_string("Idempotency key not found"),
      ngx_string("The store has no row for this key: it was never "
                 "claimed, was released or forgotten, or was purged."),
      0 },

    [NGX_HTTP_IDEMPOTENCY_P_CHANGED] = {
      NGX_HTTP_CONFLICT, NGX_HTTP_IDEMPOTENCY_ERROR,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "key-changed"),
      ngx_string("Idempotency key changed"),
      ngx_string("The key's row is no longer the version given: it was "
                 "renewed, completed or taken over since.  Nothing was "
                 "changed; read it again (\"current\")."),
      0 },

    [NGX_HTTP_IDEMPOTENCY_P_NOT_APPLICABLE] = {
      NGX_HTTP_CONFLICT, NGX_HTTP_IDEMPOTENCY_ERROR,
      ngx_string(NGX_HTTP_IDEMPOTENCY_TYPE "action-not-applicable"),
      ngx_string("Action not applicable"),
      ngx_string("The action does not apply to the key's state."),
      0 }
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_problems,
                                 NGX_HTTP_IDEMPOTENCY_NPROBLEMS);


/*
 * A gRPC call gets the same answers as gRPC statuses, in a trailers-only
 * response (HTTP 200), which every gRPC client reads as the call's end:
 * a client's mistake is INVALID_ARGUMENT (or UNAUTHENTICATED for no
 * identity to scope the key to); a key used for another call
 * FAILED_PRECONDITION; a key still in progress ABORTED, the store down
 * UNAVAILABLE, both with grpc-retry-pushback-ms; an executed call whose
 * answer is not stored, or that the fence found executed, ALREADY_EXISTS
 * (the backend's result reference is not carried); an outcome nobody
 * knows UNKNOWN.
 * grpc-message is the problem's title and detail.
 */
static ngx_http_idempotency_grpc_code_e  ngx_http_idempotency_grpc_problems[]
    = {
    [NGX_HTTP_IDEMPOTENCY_P_MISSING] =
        NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT,
    [NGX_HTTP_IDEMPOTENCY_P_INVALID] =
        NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT,
    [NGX_HTTP_IDEMPOTENCY_P_MISMATCH] =
        NGX_HTTP_IDEMPOTENCY_GRPC_FAILED_PRECONDITION,
    [NGX_HTTP_IDEMPOTENCY_P_CONFLICT] = NGX_HTTP_IDEMPOTENCY_GRPC_ABORTED,
    [NGX_HTTP_IDEMPOTENCY_P_UNSTORED] =
        NGX_HTTP_IDEMPOTENCY_GRPC_ALREADY_EXISTS,
    [NGX_HTTP_IDEMPOTENCY_P_STORE] = NGX_HTTP_IDEMPOTENCY_GRPC_UNAVAILABLE,
    [NGX_HTTP_IDEMPOTENCY_P_SCOPE] = NGX_HTTP_IDEMPOTENCY_GRPC_UNAUTHENTICATED,
    [NGX_HTTP_IDEMPOTENCY_P_NOT_ISSUED] =
        NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT,
    [NGX_HTTP_IDEMPOTENCY_P_UNKNOWN] = NGX_HTTP_IDEMPOTENCY_GRPC_UNKNOWN,
    [NGX_HTTP_IDEMPOTENCY_P_EXECUTED] =
        NGX_HTTP_IDEMPOTENCY_GRPC_ALREADY_EXISTS,
    [NGX_HTTP_IDEMPOTENCY_P_EXHAUSTED] =
        NGX_HTTP_IDEMPOTENCY_GRPC_DEADLINE_EXCEEDED,
    [NGX_HTTP_IDEMPOTENCY_P_BODY] = NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT,
    [NGX_HTTP_IDEMPOTENCY_P_SIGNATURE] =
        NGX_HTTP_IDEMPOTENCY_GRPC_UNAUTHENTICATED,

    /* the operator API is not called over gRPC; for completeness */

    [NGX_HTTP_IDEMPOTENCY_P_ADMIN_REQUEST] =
        NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT,
    [NGX_HTTP_IDEMPOTENCY_P_ADMIN_METHOD] =
        NGX_HTTP_IDEMPOTENCY_GRPC_UNIMPLEMENTED,
    [NGX_HTTP_IDEMPOTENCY_P_NOT_FOUND] = NGX_HTTP_IDEMPOTENCY_GRPC_NOT_FOUND,
    [NGX_HTTP_IDEMPOTENCY_P_CHANGED] = NGX_HTTP_IDEMPOTENCY_GRPC_ABORTED,
    [NGX_HTTP_IDEMPOTENCY_P_NOT_APPLICABLE] =
        NGX_HTTP_IDEMPOTENCY_GRPC_FAILED_PRECONDITION
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_grpc_problems,
                                 NGX_HTTP_IDEMPOTENCY_NPROBLEMS);


/*
 * The size checks above cannot see an entry left out in the middle of a
 * table: it would be zeros, an answer with no status and, to a gRPC
 * client, grpc-status 0, the call's success.  Checked once, at start.
 */

ngx_int_t
ngx_http_idempotency_problem_check(ngx_log_t *log)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_IDEMPOTENCY_NPROBLEMS; i++) {
        if (ngx_http_idempotency_problems[i].status == 0
            || ngx_http_idempotency_problems[i].type.len == 0
            || ngx_http_idempotency_grpc_problems[i]
               == NGX_HTTP_IDEMPOTENCY_GRPC_OK)
        {
            ngx_log_error(NGX_LOG_EMERG, log, 0,
                          "idempotency: problem %ui has no entry in "
                          "problem.c's tables", i);
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_problem(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    time_t retry_after, ngx_str_t *members)
{
    return ngx_http_idempotency_problem_out(r, problem, detail, members,
                                retry_after,
                                ngx_http_idempotency_problems[problem].hints);
}


ngx_int_t
ngx_http_idempotency_problem_ext(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    ngx_str_t *members)
{
    return ngx_http_idempotency_problem_out(r, problem, detail, members, 0,
                                            0);
}


ngx_uint_t
ngx_http_idempotency_problem_status(ngx_http_idempotency_problem_e problem)
{
    return ngx_http_idempotency_problems[problem].variable;
}


static ngx_int_t
ngx_http_idempotency_problem_out(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    ngx_str_t *members, time_t retry_after, ngx_uint_t hints)
{
    size_t                           len, escape;
    ngx_str_t                        value;
    ngx_uint_t                       i;
    ngx_buf_t                       *b;
    ngx_http_idempotency_problem_t  *p;

    static ngx_str_t  retry_after_key = ngx_string("Retry-After");
    static ngx_str_t  retry_keys[] = {
        ngx_string("Stripe-Should-Retry"),
        ngx_string("X-Should-Retry")
    };
    static ngx_str_t  retry_values[] = {
        ngx_string("false"),
        ngx_string("true")
    };

    p = &ngx_http_idempotency_problems[problem];

    if (ngx_http_discard_request_body(r) != NGX_OK) {
        r->keepalive = 0;
    }

    if (detail == NULL) {
        detail = &p->detail;
    }

    if (ngx_http_idempotency_grpc_request(r)) {
        return ngx_http_idempotency_problem_grpc(r, problem, detail,
                                                 retry_after);
    }

    /* a detail of the caller's may quote what a client sent */

    escape = ngx_escape_json(NULL, detail->data, detail->len);

    len = sizeof("{\"type\":\"\",\"title\":\"\",\"status\":,\"detail\":\"\""
                 ",}\n")
          - 1 + p->type.len + p->title.len + NGX_INT_T_LEN + detail->len
          + escape + (members ? members->len : 0);

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_sprintf(b->last,
                          "{\"type\":\"%V\",\"title\":\"%V\","
                          "\"status\":%ui,\"detail\":\"",
                          &p->type, &p->title, p->status);

    b->last = (u_char *) ngx_escape_json(b->last, detail->data, detail->len);

    if (members && members->len) {
        b->last = ngx_sprintf(b->last, "\",%V}\n", members);

    } else {
        b->last = ngx_cpymem(b->last, "\"}\n", 3);
    }

    b->last_buf = 1;
    b->last_in_chain = 1;

    r->headers_out.status = p->status;

    if (p->status == 422) {
        /* nginx 1.22 has no reason phrase of its own for 422 */
        ngx_str_set(&r->headers_out.status_line, "422 Unprocessable Content");
    }
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/problem+json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    if (retry_after > 0) {
        value.data = ngx_pnalloc(r->pool, NGX_TIME_T_LEN);
        if (value.data == NULL) {
            return NGX_ERROR;
        }

        value.len = ngx_sprintf(value.data, "%T", retry_after) - value.data;

        if (ngx_http_idempotency_add_header(r, &retry_after_key, &value)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    /* the SDKs' own rules would retry a 409 or a 5xx blindly */

    for (i = 0; hints && i < 2; i++) {
        if (ngx_http_idempotency_add_header(r, &retry_keys[i],
                                            &retry_values[retry_after > 0])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_idempotency_send(r, b);
}


/* the problem as a trailers-only gRPC response: no body, its end is
 * the header (HTTP/2 ends the stream with it) */

static ngx_int_t
ngx_http_idempotency_problem_grpc(ngx_http_request_t *r,
    ngx_http_idempotency_problem_e problem, ngx_str_t *detail,
    time_t retry_after)
{
    u_char                          *t;
    ngx_str_t                        text, value;
    ngx_http_idempotency_problem_t  *p;

    static ngx_str_t  grpc_status = ngx_string("grpc-status");
    static ngx_str_t  grpc_message = ngx_string("grpc-message");
    static ngx_str_t  pushback = ngx_string("grpc-retry-pushback-ms");

    p = &ngx_http_idempotency_problems[problem];

    text.len = p->title.len + sizeof(": ") - 1 + detail->len;
    text.data = ngx_pnalloc(r->pool, text.len + NGX_INT_T_LEN
                                        + NGX_TIME_T_LEN + 3);
    if (text.data == NULL) {
        return NGX_ERROR;
    }

    t = ngx_cpymem(text.data, p->title.data, p->title.len);
    t = ngx_cpymem(t, ": ", 2);
    ngx_memcpy(t, detail->data, detail->len);

    if (ngx_http_idempotency_grpc_message(r->pool, &text, &value) != NGX_OK
        || ngx_http_idempotency_add_header(r, &grpc_message, &value)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    /* the status and the pushback in what is left of text's memory */

    value.data = text.data + text.len;
    value.len = ngx_sprintf(value.data, "%ui",
                            (ngx_uint_t) ngx_http_idempotency_grpc_problems
                                                             [problem])
                - value.data;

    if (ngx_http_idempotency_add_header(r, &grpc_status, &value) != NGX_OK) {
        return NGX_ERROR;
    }

    if (retry_after > 0) {
        value.data += value.len;
        value.len = ngx_sprintf(value.data, "%T000", retry_after)
                    - value.data;

        if (ngx_http_idempotency_add_header(r, &pushback, &value) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = 0;
    ngx_str_set(&r->headers_out.content_type, "application/grpc");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    return ngx_http_idempotency_send(r, NULL);
}


ngx_int_t
ngx_http_idempotency_send(ngx_http_request_t *r, ngx_buf_t *b)
{
    ngx_int_t    rc;
    ngx_chain_t  out;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    if (b == NULL) {
        return ngx_http_send_special(r, NGX_HTTP_LAST);
    }

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


ngx_int_t
ngx_http_idempotency_send_json(ngx_http_request_t *r, ngx_buf_t *b)
{
    static ngx_str_t  cache_control = ngx_string("Cache-Control");
    static ngx_str_t  no_store = ngx_string("no-store");

    if (ngx_http_idempotency_add_header(r, &cache_control, &no_store)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    return ngx_http_idempotency_send(r, b);
}


ngx_int_t
ngx_http_idempotency_add_header(ngx_http_request_t *r, ngx_str_t *key,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key = *key;
    h->value = *value;
    h->lowcase_key = NULL;

    return NGX_OK;
}
