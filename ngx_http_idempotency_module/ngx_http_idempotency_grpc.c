
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: gRPC calls.
 */


#include "ngx_http_idempotency_grpc.h"
#include "ngx_http_idempotency_outcome.h"
#include "ngx_http_idempotency_record.h"


/*
 * What an upstream's status says of the call (outcome.h's values): in a
 * trailers-only response, which comes before any response header, and
 * in the trailers, after the server sent its header (and so ran the
 * call's handler).  Only UNAVAILABLE, UNIMPLEMENTED and
 * RESOURCE_EXHAUSTED say, in a trailers-only response, that the call
 * never ran (a server going away, no such method, a message too large or
 * a quota before the handler): the key is given back.  CANCELLED and
 * DEADLINE_EXCEEDED say the server gave up on the call, not how it
 * ended: its outcome is unknown.  Every other status is the call's
 * answer, stored and replayed like a 4xx.
 */
typedef struct {
    ngx_uint_t   first;
    ngx_uint_t   trailer;
} ngx_http_idempotency_grpc_code_t;


#define ngx_http_idempotency_grpc_answer                                     \
    { NGX_HTTP_IDEMPOTENCY_ANSWERED, NGX_HTTP_IDEMPOTENCY_ANSWERED }
#define ngx_http_idempotency_grpc_not_run                                    \
    { NGX_HTTP_IDEMPOTENCY_NOT_SENT, NGX_HTTP_IDEMPOTENCY_ANSWERED }
#define ngx_http_idempotency_grpc_unsure                                     \
    { NGX_HTTP_IDEMPOTENCY_UNSURE, NGX_HTTP_IDEMPOTENCY_UNSURE }


static ngx_http_idempotency_grpc_code_t  ngx_http_idempotency_grpc_codes[] = {
    [NGX_HTTP_IDEMPOTENCY_GRPC_OK] = ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_CANCELLED] = ngx_http_idempotency_grpc_unsure,
    [NGX_HTTP_IDEMPOTENCY_GRPC_UNKNOWN] = ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_INVALID_ARGUMENT] =
        ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_DEADLINE_EXCEEDED] =
        ngx_http_idempotency_grpc_unsure,
    [NGX_HTTP_IDEMPOTENCY_GRPC_NOT_FOUND] = ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_ALREADY_EXISTS] =
        ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_PERMISSION_DENIED] =
        ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_RESOURCE_EXHAUSTED] =
        ngx_http_idempotency_grpc_not_run,
    [NGX_HTTP_IDEMPOTENCY_GRPC_FAILED_PRECONDITION] =
        ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_ABORTED] = ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_OUT_OF_RANGE] =
        ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_UNIMPLEMENTED] =
        ngx_http_idempotency_grpc_not_run,
    [NGX_HTTP_IDEMPOTENCY_GRPC_INTERNAL] = ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_UNAVAILABLE] =
        ngx_http_idempotency_grpc_not_run,
    [NGX_HTTP_IDEMPOTENCY_GRPC_DATA_LOSS] = ngx_http_idempotency_grpc_answer,
    [NGX_HTTP_IDEMPOTENCY_GRPC_UNAUTHENTICATED] =
        ngx_http_idempotency_grpc_answer
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_grpc_codes,
                                 NGX_HTTP_IDEMPOTENCY_NGRPC_CODES);


static ngx_uint_t ngx_http_idempotency_grpc_type(ngx_str_t *type);
static ngx_table_elt_t *ngx_http_idempotency_grpc_status(
    ngx_list_part_t *part);


ngx_uint_t
ngx_http_idempotency_grpc_request(ngx_http_request_t *r)
{
    if (r->headers_in.content_type == NULL) {
        return 0;
    }

    return ngx_http_idempotency_grpc_type(&r->headers_in.content_type->value);
}


/*
 * application/grpc, application/grpc+proto, application/grpc;...; not
 * application/grpc-web..., whose status comes in the body, where the
 * module reads none, and whose clients read the module's HTTP problems
 * by their HTTP status
 */

static ngx_uint_t
ngx_http_idempotency_grpc_type(ngx_str_t *type)
{
    u_char  c;
    size_t  n;

    n = sizeof("application/grpc") - 1;

    /*
     * the 'g' first: the common types of the same length, such as
     * application/json, part from it only there, and the header filter
     * asks this of every response
     */

    if (type->len < n
        || ngx_tolower(type->data[n - 4]) != 'g'
        || ngx_strncasecmp(type->data, (u_char *) "application/grpc", n)
           != 0)
    {
        return 0;
    }

    c = (type->len == n) ? ';' : type->data[n];

    return c == '+' || c == ';';
}


ngx_uint_t
ngx_http_idempotency_grpc_outcome(ngx_http_request_t *r, ngx_uint_t trailers)
{
    ngx_int_t         code;
    ngx_table_elt_t  *h;

    if (!ngx_http_idempotency_grpc_type(&r->headers_out.content_type)) {
        return NGX_HTTP_IDEMPOTENCY_ANSWERED;
    }

    h = trailers ? ngx_http_idempotency_grpc_status(
                                         &r->headers_out.trailers.part)
                 : NULL;

    if (h == NULL) {
        h = ngx_http_idempotency_grpc_status(&r->headers_out.headers.part);

        if (h == NULL) {
            /* no status yet, or (at the end of what grpc_pass passed)
             * none at all: a call whose server never said how it ended
             * may have run, and its answer is not whole */
            return (trailers && r->upstream
                    && r->upstream->conf->pass_trailers)
                   ? NGX_HTTP_IDEMPOTENCY_UNSURE
                   : NGX_HTTP_IDEMPOTENCY_ANSWERED;
        }

        if (trailers) {
            /* trailers-only: decided by its header */
            return NGX_HTTP_IDEMPOTENCY_ANSWERED;
        }
    }

    code = ngx_atoi(h->value.data, h->value.len);

    /* a status gRPC does not define is the server's answer */

    if (code < 0 || code >= NGX_HTTP_IDEMPOTENCY_NGRPC_CODES) {
        return NGX_HTTP_IDEMPOTENCY_ANSWERED;
    }

    return trailers ? ngx_http_idempotency_grpc_codes[code].trailer
                    : ngx_http_idempotency_grpc_codes[code].first;
}


ngx_uint_t
ngx_http_idempotency_grpc_trailers_follow(ngx_http_request_t *r)
{
    return ngx_http_idempotency_grpc_type(&r->headers_out.content_type)
           && ngx_http_idempotency_grpc_status(&r->headers_out.headers.part)
              == NULL;
}


/* the grpc-status field of a header or trailer list, or NULL */

static ngx_table_elt_t *
ngx_http_idempotency_grpc_status(ngx_list_part_t *part)
{
    ngx_uint_t        i;
    ngx_table_elt_t  *h;

    i = 0;

    while ((h = ngx_http_idempotency_next_header(&part, &i)) != NULL) {
        if (h->hash != 0
            && h->key.len == sizeof("grpc-status") - 1
            && ngx_strncasecmp(h->key.data, (u_char *) "grpc-status",
                               h->key.len) == 0)
        {
            return h;
        }
    }

    return NULL;
}


/* gRPC's Percent-Encoded: what is not printable ASCII, and "%" itself */

ngx_int_t
ngx_http_idempotency_grpc_message(ngx_pool_t *pool, ngx_str_t *text,
    ngx_str_t *out)
{
    u_char  c, *p;
    size_t  i, len;

    static u_char  hex[] = "0123456789ABCDEF";

    len = text->len;

    for (i = 0; i < text->len; i++) {
        c = text->data[i];

        if (c < 0x20 || c > 0x7e || c == '%') {
            len += 2;
        }
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    out->len = len;

    for (i = 0; i < text->len; i++) {
        c = text->data[i];

        if (c < 0x20 || c > 0x7e || c == '%') {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 0xf];

        } else {
            *p++ = c;
        }
    }

    return NGX_OK;
}
