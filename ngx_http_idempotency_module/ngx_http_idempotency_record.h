
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the stored response record.
 *
 * Format 1, all integers big-endian:
 *
 *     "IDR1"  u16 status  u16 n
 *     n times: u16 name length, name, u32 value length, value
 *     u32 body length, body
 *
 * A header named ":status" carries the upstream's status line, if it had
 * one.  The header block is made when the response headers pass; the body
 * length and the body are appended when the last byte has passed.
 *
 * Format 2 ("IDR2") is format 1 with three more pseudo-headers, written
 * only by a record that needs one (format 1 records are still written,
 * and both are read):
 *
 *     ":length"    a response without a body (the answer to a HEAD): the
 *                  Content-Length its header was sent with, in decimal,
 *                  or empty for none
 *     ":location"  empty; the Location that follows is the one nginx's
 *                  header filter made absolute (r->headers_out.location)
 *     ":override-charset"
 *                  the charset the backend named in X-Accel-Charset
 *                  (r->headers_out.override_charset)
 *
 * Format 3 ("IDR3") is format 2 with the response's trailers after the
 * body, written only for a response that has trailers:
 *
 *     u32 body length, body
 *     u16 t (1 or more), t times: u16 name length, name,
 *                                  u32 value length, value
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_RECORD_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_RECORD_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


#define NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC     "IDR1"
#define NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC2    "IDR2"
#define NGX_HTTP_IDEMPOTENCY_RECORD_MAGIC3    "IDR3"
#define NGX_HTTP_IDEMPOTENCY_RECORD_LENGTH    ":length"
#define NGX_HTTP_IDEMPOTENCY_RECORD_LOCATION  ":location"
#define NGX_HTTP_IDEMPOTENCY_RECORD_OVERRIDE  ":override-charset"


typedef struct {
    ngx_uint_t    status;
    ngx_array_t   headers;      /* of ngx_keyval_t, pointing into data */
    ngx_str_t     body;
    ngx_array_t   trailers;     /* of ngx_keyval_t; nelts 0: none */
} ngx_http_idempotency_record_t;


/* the header block of r's response, in pool; skip: more header names
 * (of ngx_str_t) to leave out, or NULL.  NGX_DECLINED: the response has
 * something ngx_http_idempotency_record_validate() would refuse */
ngx_int_t ngx_http_idempotency_record_head(ngx_http_request_t *r,
    ngx_pool_t *pool, ngx_array_t *skip, ngx_str_t *out);

/* the 4 bytes that frame a body of len bytes */
void ngx_http_idempotency_record_body_len(u_char *p, size_t len);

/*
 * The trailer block of r's response (r->headers_out.trailers, as the
 * upstream passed them), in pool: out->len 0 when it has none.
 * NGX_DECLINED: a trailer ngx_http_idempotency_record_validate() would
 * refuse; NGX_ERROR: no memory, or more than the format frames.
 */
ngx_int_t ngx_http_idempotency_record_trailers(ngx_http_request_t *r,
    ngx_pool_t *pool, ngx_str_t *out);

/* a record whose head starts at p gets a trailer block after its body */
void ngx_http_idempotency_record_has_trailers(u_char *p);

/* parses data (not copied); NGX_ERROR on any malformed input */
ngx_int_t ngx_http_idempotency_record_parse(ngx_pool_t *pool, u_char *data,
    size_t len, ngx_http_idempotency_record_t *rec);

/*
 * What a record may carry to a client, whoever wrote it: a status of
 * 100-599, header names that are tokens (or the ":status" pseudo-header),
 * values without CR, LF or NUL, and none of the headers nginx makes
 * itself or that frame the message (Content-Length, Transfer-Encoding,
 * Connection, ...).  NGX_ERROR with *why set otherwise.
 */
ngx_int_t ngx_http_idempotency_record_validate(
    ngx_http_idempotency_record_t *rec, const char **why);

/* sets r's status, headers and trailers from the record, as nginx's
 * upstream sets them from the backend's response */
ngx_int_t ngx_http_idempotency_record_apply(ngx_http_request_t *r,
    ngx_http_idempotency_record_t *rec);


/* n bytes of v, big-endian, as every format of the module has them */
u_char *ngx_http_idempotency_put_be(u_char *p, uint64_t v, size_t n);
uint64_t ngx_http_idempotency_get_be(u_char *p, size_t n);

/*
 * The next header of a list of headers, from element *i of *part on,
 * walking its parts; NULL at its end.  Start with the list's part, 0.
 */
ngx_table_elt_t *ngx_http_idempotency_next_header(ngx_list_part_t **part,
    ngx_uint_t *i);


#endif /* _NGX_HTTP_IDEMPOTENCY_RECORD_H_INCLUDED_ */
