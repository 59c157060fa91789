
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: keys the server issues.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "ngx_http_idempotency_issue.h"
#include "ngx_http_idempotency_entry.h"
#include "ngx_http_idempotency_record.h"
#include "ngx_http_idempotency_problem.h"


#define NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX   "ik1."
#define NGX_HTTP_IDEMPOTENCY_ISSUED_DOMAIN   "idempotency-issued/1"

/* 16 random bytes and a u64 expiry; their base64url, then the tag's */
#define NGX_HTTP_IDEMPOTENCY_ISSUED_RAW      24
#define NGX_HTTP_IDEMPOTENCY_ISSUED_RAW64    32
#define NGX_HTTP_IDEMPOTENCY_ISSUED_TAG64    43
#define NGX_HTTP_IDEMPOTENCY_ISSUED_LEN                                      \
    (sizeof(NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX) - 1                          \
     + NGX_HTTP_IDEMPOTENCY_ISSUED_RAW64 + 1                                 \
     + NGX_HTTP_IDEMPOTENCY_ISSUED_TAG64)


static ngx_int_t ngx_http_idempotency_issue_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_issue_make(
    ngx_http_idempotency_store_t *store, time_t expires, u_char *key);
static ngx_int_t ngx_http_idempotency_issue_tag(void *secret, u_char *raw,
    u_char *tag);


char *
ngx_http_idempotency_key_issuer(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_str_t                 *value;
    ngx_http_core_loc_conf_t  *clcf;

    if (ilcf->issuer_ttl != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;
    ilcf->issuer_ttl = 3600;

    if (cf->args->nelts == 2) {
        ilcf->issuer_ttl = ngx_parse_time(&value[1], 1);

        if (ilcf->issuer_ttl == (time_t) NGX_ERROR || ilcf->issuer_ttl == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "it must be a time of at least 1s, such as "
                               "1h", &value[1], &cmd->name);
            return NGX_CONF_ERROR;
        }
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_idempotency_issue_handler;

    return NGX_CONF_OK;
}


/*
 * A fresh key, in a JSON body and in the key header, as the client is to
 * send it back: {"key":"ik1....","header":"Idempotency-Key",
 * "expires_at":"2026-12-01T10:00:00Z"}
 */

static ngx_int_t
ngx_http_idempotency_issue_handler(ngx_http_request_t *r)
{
    time_t                            expires;
    ngx_tm_t                          tm;
    ngx_int_t                         rc;
    ngx_buf_t                        *b;
    ngx_str_t                         value;
    ngx_http_idempotency_loc_conf_t  *ilcf;
    u_char                    key[NGX_HTTP_IDEMPOTENCY_ISSUED_LEN];

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_POST))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idempotency_module);

    expires = ngx_time() + ilcf->issuer_ttl;

    if (ngx_http_idempotency_issue_make(ilcf->store, expires, key)
        != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_create_temp_buf(r->pool, sizeof("{\"key\":\"\",\"header\":\"\","
                                            "\"expires_at\":\"\"}\n")
                                     + sizeof(key) + ilcf->header.len
                                     + sizeof("1970-01-01T00:00:00Z"));
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the header name is a token (checked when read): no JSON escaping */

    ngx_gmtime(expires, &tm);

    b->last = ngx_sprintf(b->last, "{\"key\":\"%*s\",\"header\":\"%V\","
                          "\"expires_at\":\"%4d-%02d-%02dT%02d:%02d:%02dZ\"}"
                          "\n", sizeof(key), key, &ilcf->header,
                          tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                          tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec);
    value.len = sizeof(key);
    value.data = ngx_pnalloc(r->pool, sizeof(key));

    if (value.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(value.data, key, sizeof(key));

    if (ngx_http_idempotency_add_header(r, &ilcf->header, &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_idempotency_send_json(r, b);
}


static ngx_int_t
ngx_http_idempotency_issue_make(ngx_http_idempotency_store_t *store,
    time_t expires, u_char *key)
{
    void       **secrets;
    u_char      *p;
    ngx_str_t    src, dst;
    u_char       raw[NGX_HTTP_IDEMPOTENCY_ISSUED_RAW];
    u_char       tag[NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN];

    if (RAND_bytes(raw, 16) != 1) {
        return NGX_ERROR;
    }

    (void) ngx_http_idempotency_put_be(raw + 16, expires, 8);

    secrets = store->secrets->elts;

    if (ngx_http_idempotency_issue_tag(secrets[0], raw, tag) != NGX_OK) {
        return NGX_ERROR;
    }

    p = ngx_cpymem(key, NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX,
                   sizeof(NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX) - 1);

    src.data = raw;
    src.len = sizeof(raw);
    dst.data = p;
    ngx_encode_base64url(&dst, &src);
    p += dst.len;

    *p++ = '.';

    src.data = tag;
    src.len = sizeof(tag);
    dst.data = p;
    ngx_encode_base64url(&dst, &src);

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_issued(ngx_http_idempotency_store_t *store,
    ngx_str_t *key, const char **why)
{
    void       **secrets;
    u_char      *p;
    ngx_str_t    src, dst;
    ngx_uint_t   i;
    u_char       raw[NGX_HTTP_IDEMPOTENCY_ISSUED_RAW];
    u_char       tag[NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN];
    u_char       mac[NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN];
    u_char       canon[NGX_HTTP_IDEMPOTENCY_ISSUED_TAG64 + 1];

    p = key->data;

    if (key->len != NGX_HTTP_IDEMPOTENCY_ISSUED_LEN
        || ngx_strncmp(p, NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX,
                       sizeof(NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX) - 1)
           != 0
        || p[key->len - NGX_HTTP_IDEMPOTENCY_ISSUED_TAG64 - 1] != '.')
    {
        *why = "not a key this server issues";
        return NGX_DECLINED;
    }

    p += sizeof(NGX_HTTP_IDEMPOTENCY_ISSUED_PREFIX) - 1;

    src.data = p;
    src.len = NGX_HTTP_IDEMPOTENCY_ISSUED_RAW64;
    dst.data = raw;

    if (ngx_decode_base64url(&dst, &src) != NGX_OK
        || dst.len != sizeof(raw))
    {
        *why = "not a key this server issues";
        return NGX_DECLINED;
    }

    src.data = p + NGX_HTTP_IDEMPOTENCY_ISSUED_RAW64 + 1;
    src.len = NGX_HTTP_IDEMPOTENCY_ISSUED_TAG64;
    dst.data = tag;

    if (ngx_decode_base64url(&dst, &src) != NGX_OK
        || dst.len != sizeof(tag))
    {
        *why = "not a key this server issues";
        return NGX_DECLINED;
    }

    /* the unused low bits of the last character must be zero: one
     * issued key is one key, not four spellings of it */

    p = src.data;
    src.data = tag;
    src.len = sizeof(tag);
    dst.data = canon;
    ngx_encode_base64url(&dst, &src);

    if (dst.len != NGX_HTTP_IDEMPOTENCY_ISSUED_TAG64
        || ngx_memcmp(canon, p, dst.len) != 0)
    {
        *why = "not a key this server issues";
        return NGX_DECLINED;
    }

    secrets = store->secrets->elts;

    for (i = 0; i < store->secrets->nelts; i++) {
        if (ngx_http_idempotency_issue_tag(secrets[i], raw, mac) != NGX_OK) {
            return NGX_ERROR;
        }

        if (CRYPTO_memcmp(mac, tag, sizeof(tag)) == 0) {
            break;
        }
    }

    if (i == store->secrets->nelts) {
        *why = "not signed with this store's secret";
        return NGX_DECLINED;
    }

    if (ngx_http_idempotency_get_be(raw + 16, 8) <= (uint64_t) ngx_time()) {
        *why = "the key has expired";
        return NGX_ABORT;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_issue_tag(void *secret, u_char *raw, u_char *tag)
{
    return ngx_http_idempotency_mac(secret,
                                    (u_char *)
                                    NGX_HTTP_IDEMPOTENCY_ISSUED_DOMAIN,
                                    sizeof(NGX_HTTP_IDEMPOTENCY_ISSUED_DOMAIN)
                                    - 1,
                                    raw, NGX_HTTP_IDEMPOTENCY_ISSUED_RAW, tag);
}
