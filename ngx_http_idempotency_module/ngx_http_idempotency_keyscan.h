
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the sources of "idempotency_key", the
 * body's fields read in pieces, and the key composed of them.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_KEYSCAN_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_KEYSCAN_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_json.h"


#define NGX_HTTP_IDEMPOTENCY_SOURCES     NGX_HTTP_IDEMPOTENCY_JSON_PATHS

/* a source */
#define NGX_HTTP_IDEMPOTENCY_SRC_VALUE   0    /* a complex value */
#define NGX_HTTP_IDEMPOTENCY_SRC_JSON    1    /* json=PATH */
#define NGX_HTTP_IDEMPOTENCY_SRC_FORM    2    /* form=NAME */

/* what became of a part of the key */
#define NGX_HTTP_IDEMPOTENCY_PART_OK       0
#define NGX_HTTP_IDEMPOTENCY_PART_MISSING  1
#define NGX_HTTP_IDEMPOTENCY_PART_INVALID  2
#define NGX_HTTP_IDEMPOTENCY_PART_BODY     3  /* not JSON, over max_body */


typedef struct {
    ngx_uint_t                          type;
    ngx_str_t                           name;      /* as written */
    void                               *value;     /* VALUE: keysrc.c's */
    ngx_uint_t                          n;         /* JSON, FORM: in the
                                                      scan's paths, fields */
} ngx_http_idempotency_source_t;


/* "idempotency_key": the sources in order, and the body's part of them */
struct ngx_http_idempotency_keysrc_s {
    ngx_http_idempotency_source_t       sources[NGX_HTTP_IDEMPOTENCY_SOURCES];
    ngx_uint_t                          nsources;
    ngx_http_idempotency_json_path_t    paths[NGX_HTTP_IDEMPOTENCY_SOURCES];
    ngx_uint_t                          npaths;
    ngx_str_t                           fields[NGX_HTTP_IDEMPOTENCY_SOURCES];
    ngx_uint_t                          nfields;
    size_t                              max_body;
    ngx_str_t                           max_body_text;  /* as written */
};

typedef struct ngx_http_idempotency_keyscan_s  ngx_http_idempotency_keyscan_t;


/*
 * A source as written: "json=PATH" or "form=NAME" is added to conf
 * (NGX_OK); any other text is not a body source (NGX_DECLINED), and the
 * caller takes it as a complex value; NGX_ABORT with *err: a bad one;
 * NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_source_parse(ngx_pool_t *pool,
    ngx_http_idempotency_keysrc_t *conf, ngx_str_t *text, const char **err);

/* a scan of a body for conf's JSON paths and form fields */
ngx_http_idempotency_keyscan_t *ngx_http_idempotency_keyscan_create(
    ngx_pool_t *pool, ngx_http_idempotency_keysrc_t *conf);

/*
 * The bytes of the body that will come in pieces smaller than 64 KB (a
 * body in memory in several buffers): gathered in one stage of that size,
 * up to max_body, they reach the parser as one piece
 */
void ngx_http_idempotency_keyscan_expect(
    ngx_http_idempotency_keyscan_t *scan, size_t size);

/* the next piece of the body (an ngx_http_idempotency_piece_pt) */
ngx_int_t ngx_http_idempotency_keyscan_feed(void *scan, u_char *p,
    size_t len);

/* the body's end */
ngx_int_t ngx_http_idempotency_keyscan_end(
    ngx_http_idempotency_keyscan_t *scan);

/*
 * What the body gave a JSON or form source: NGX_HTTP_IDEMPOTENCY_PART_OK
 * with *value (in the scan's memory), or another PART_* with *why;
 * NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_keyscan_part(
    ngx_http_idempotency_keyscan_t *scan, ngx_http_idempotency_source_t *src,
    ngx_str_t *value, ngx_str_t *why);

/*
 * The key of n parts: each as a netstring, "5:alice,4:1042,", so that
 * no two lists of parts make the same key.  A part must be 1 to 255
 * bytes without control characters: NGX_OK; otherwise a PART_* with
 * *bad its number and *why; NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_key_compose(ngx_pool_t *pool,
    ngx_str_t *parts, ngx_uint_t n, ngx_str_t *key, ngx_uint_t *bad,
    const char **why);


#endif /* _NGX_HTTP_IDEMPOTENCY_KEYSCAN_H_INCLUDED_ */
