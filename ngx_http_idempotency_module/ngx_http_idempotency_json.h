
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: JSON members by path in a streamed body
 * (yajl's parser).
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_JSON_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_JSON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/* at most this many paths in one scan, each at most this many steps */
#define NGX_HTTP_IDEMPOTENCY_JSON_PATHS    8
#define NGX_HTTP_IDEMPOTENCY_JSON_STEPS    16

/* what a path led to */
#define NGX_HTTP_IDEMPOTENCY_JSON_STRING   0    /* decoded */
#define NGX_HTTP_IDEMPOTENCY_JSON_NUMBER   1    /* as written */
#define NGX_HTTP_IDEMPOTENCY_JSON_OBJECT   2
#define NGX_HTTP_IDEMPOTENCY_JSON_ARRAY    3
#define NGX_HTTP_IDEMPOTENCY_JSON_NULL     4
#define NGX_HTTP_IDEMPOTENCY_JSON_BOOLEAN  5


/* a step of a path: a member's name, or an array's index */
typedef struct {
    ngx_str_t                       name;
    ngx_int_t                       index;     /* -1: a member */
} ngx_http_idempotency_json_step_t;

typedef struct {
    ngx_http_idempotency_json_step_t  *steps;
    ngx_uint_t                         nsteps;
} ngx_http_idempotency_json_path_t;

/*
 * A value at the end of path number i; p and len only for a string or
 * a number, valid during the call.  Called for each value found, again
 * for a member that appears twice.
 */
typedef void (*ngx_http_idempotency_json_found_pt)(void *data,
    ngx_uint_t i, ngx_uint_t kind, u_char *p, size_t len);

typedef struct ngx_http_idempotency_json_s  ngx_http_idempotency_json_t;


/*
 * "data.object.id", "notificationItems[0].NotificationRequestItem.x":
 * members by name after dots, array indexes in brackets.  NGX_OK, or
 * NGX_DECLINED with *err.
 */
ngx_int_t ngx_http_idempotency_json_path(ngx_pool_t *pool, ngx_str_t *text,
    ngx_http_idempotency_json_path_t *path, const char **err);

/* a scan for n paths; the parser is freed with pool */
ngx_http_idempotency_json_t *ngx_http_idempotency_json_create(
    ngx_pool_t *pool, ngx_http_idempotency_json_path_t *paths, ngx_uint_t n,
    ngx_http_idempotency_json_found_pt found, void *data);

/*
 * The next piece of the text: NGX_OK, or NGX_DECLINED once the text is
 * not JSON (ngx_http_idempotency_json_error() says why); NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_json_feed(ngx_http_idempotency_json_t *j,
    u_char *p, size_t len);

/* the end of the text: the same */
ngx_int_t ngx_http_idempotency_json_end(ngx_http_idempotency_json_t *j);

/* why the text is not JSON, in yajl's words; empty while it is */
void ngx_http_idempotency_json_error(ngx_http_idempotency_json_t *j,
    ngx_str_t *why);


#endif /* _NGX_HTTP_IDEMPOTENCY_JSON_H_INCLUDED_ */
