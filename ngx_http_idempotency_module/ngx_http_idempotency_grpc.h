
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: gRPC calls.
 *
 * A gRPC call is an HTTP/2 POST whose answer is a status (grpc-status,
 * grpc-message and trailing metadata) in the response's trailers, or in
 * its header alone (a trailers-only response).  What an upstream's status
 * says of the call, and the module's own answers as gRPC statuses.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_GRPC_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_GRPC_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/* gRPC's status codes, by their numbers */
typedef enum {
    NGX_HTTP_IDEMPOTENCY_GRPC_OK = 0,
    NGX_HTTP_IDEMPOTENCY_GRPC_CANCELLED,
    NGX_HTTP_IDEMPOTENCY_GRPC_UNKNOWN,
    NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT,
    NGX_HTTP_IDEMPOTENCY_GRPC_DEADLINE_EXCEEDED,
    NGX_HTTP_IDEMPOTENCY_GRPC_NOT_FOUND,
    NGX_HTTP_IDEMPOTENCY_GRPC_ALREADY_EXISTS,
    NGX_HTTP_IDEMPOTENCY_GRPC_PERMISSION_DENIED,
    NGX_HTTP_IDEMPOTENCY_GRPC_RESOURCE_EXHAUSTED,
    NGX_HTTP_IDEMPOTENCY_GRPC_FAILED_PRECONDITION,
    NGX_HTTP_IDEMPOTENCY_GRPC_ABORTED,
    NGX_HTTP_IDEMPOTENCY_GRPC_OUT_OF_RANGE,
    NGX_HTTP_IDEMPOTENCY_GRPC_UNIMPLEMENTED,
    NGX_HTTP_IDEMPOTENCY_GRPC_INTERNAL,
    NGX_HTTP_IDEMPOTENCY_GRPC_UNAVAILABLE,
    NGX_HTTP_IDEMPOTENCY_GRPC_DATA_LOSS,
    NGX_HTTP_IDEMPOTENCY_GRPC_UNAUTHENTICATED,

    NGX_HTTP_IDEMPOTENCY_NGRPC_CODES    /* how many */
} ngx_http_idempotency_grpc_code_e;


/* 1: the request is a gRPC call (Content-Type application/grpc, +... or
 * ;...: not gRPC-Web) */
ngx_uint_t ngx_http_idempotency_grpc_request(ngx_http_request_t *r);

/*
 * What the gRPC status of r's response says of the call, as outcome.h
 * names it: NGX_HTTP_IDEMPOTENCY_ANSWERED (the call's answer, or not a
 * gRPC response), _NOT_SENT (a trailers-only status that says the call
 * never ran) or _UNSURE (the call was given up on, its outcome unknown).
 * trailers 0: the status in the response's header (trailers-only), if
 * any; 1: the status in its trailers, or its header's: a gRPC response
 * with neither is cut (UNSURE), never an answer without its status.
 */
ngx_uint_t ngx_http_idempotency_grpc_outcome(ngx_http_request_t *r,
    ngx_uint_t trailers);

/* 1: r's response is gRPC and its header has no status: trailers follow,
 * whatever its Content-Length says of the body */
ngx_uint_t ngx_http_idempotency_grpc_trailers_follow(ngx_http_request_t *r);

/* text as a grpc-message value: percent-encoded, in pool */
ngx_int_t ngx_http_idempotency_grpc_message(ngx_pool_t *pool,
    ngx_str_t *text, ngx_str_t *out);


#endif /* _NGX_HTTP_IDEMPOTENCY_GRPC_H_INCLUDED_ */
