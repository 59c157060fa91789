
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the key header, the lookup hash and the
 * request fingerprint.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_KEY_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_KEY_H_INCLUDED_


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_body.h"


/*
 * Finds the key header: NGX_DECLINED when absent, NGX_ERROR when it is
 * present more than once, NGX_OK with its raw value otherwise.
 */
ngx_int_t ngx_http_idempotency_find_header(ngx_http_request_t *r,
    ngx_str_t *name, ngx_str_t *value);

/*
 * Parses an RFC 8941 sf-String ("abc", \" and \\ escapes) or a bare
 * token into its characters.  NGX_OK, or NGX_DECLINED with *reason set.
 */
ngx_int_t ngx_http_idempotency_parse_key(ngx_pool_t *pool, ngx_str_t *raw,
    ngx_str_t *key, const char **reason);

/* SHA-256 of the scope and the key, unambiguously framed */
ngx_int_t ngx_http_idempotency_key_hash(ngx_str_t *scope, ngx_str_t *key,
    u_char *out);

/*
 * The same for a key composed from idempotency_key's sources (keyscan.h),
 * in a domain of its own: never the hash of a header's key
 */
ngx_int_t ngx_http_idempotency_source_hash(ngx_str_t *scope, ngx_str_t *key,
    u_char *out);

/*
 * The name of a key's life in a fence's marker table: SHA-256 of the key
 * hash and the life (the token of the life's first claim); a key without
 * one (claimed before lives, or in a store whose keys are not fenced) is
 * named by its key hash, as markers were before.
 */
ngx_int_t ngx_http_idempotency_marker_hash(u_char *key_hash, u_char *life,
    u_char *out);

/*
 * A fingerprint in progress: a body in a temp file is hashed in slices
 * (body.h), one per call, with its own SHA-256 context (freed with
 * r->pool); a body in memory at once, with the process's.  Zeroed before
 * the first call.
 */
typedef struct {
    void                           *md;
    ngx_http_idempotency_walk_t     walk;
} ngx_http_idempotency_fp_t;

/*
 * SHA-256 of the method, the URI with arguments and the request body:
 * NGX_OK with out set; NGX_AGAIN: a slice of a temp file was hashed, call
 * again (from a later event); NGX_ERROR.
 */
ngx_int_t ngx_http_idempotency_fingerprint(ngx_http_request_t *r,
    ngx_http_idempotency_fp_t *fp, u_char *out);

/*
 * The same in three steps, for a walk over the body that feeds others
 * too: start (method and URI), a piece of the body at a time
 * (an ngx_http_idempotency_piece_pt), finish.
 */
ngx_int_t ngx_http_idempotency_fp_start(ngx_http_request_t *r,
    ngx_http_idempotency_fp_t *fp);
ngx_int_t ngx_http_idempotency_fp_update(void *fp, u_char *p, size_t len);
ngx_int_t ngx_http_idempotency_fp_finish(ngx_http_idempotency_fp_t *fp,
    u_char *out);

/* frees the process's SHA-256 context (worker exit) */
void ngx_http_idempotency_key_exit(void);


#endif /* _NGX_HTTP_IDEMPOTENCY_KEY_H_INCLUDED_ */
