
/*
 * ngx_http_idempotency_module: the key header, the lookup hash and the
 * request fingerprint.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_KEY_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_KEY_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


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

/* SHA-256 of the method, the URI with arguments and the request body */
ngx_int_t ngx_http_idempotency_fingerprint(ngx_http_request_t *r,
    u_char *out);

/* frees the process's SHA-256 context (worker exit) */
void ngx_http_idempotency_key_exit(void);


#endif /* _NGX_HTTP_IDEMPOTENCY_KEY_H_INCLUDED_ */
