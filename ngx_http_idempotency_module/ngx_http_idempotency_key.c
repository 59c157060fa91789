
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the key header, the lookup hash and the
 * request fingerprint.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <openssl/evp.h>

#include "ngx_http_idempotency_key.h"
#include "ngx_http_idempotency_record.h"


static ngx_int_t ngx_http_idempotency_hash_framed(const char *domain,
    ngx_str_t *scope, ngx_str_t *key, u_char *out);
static EVP_MD_CTX *ngx_http_idempotency_sha256(void);
static const EVP_MD *ngx_http_idempotency_sha256_md(void);
static void ngx_http_idempotency_fp_cleanup(void *data);


/*
 * One SHA-256 context per process, made on first use and reused by every
 * hash.  With OpenSSL 3, EVP_sha256() in EVP_DigestInit_ex() fetches the
 * implementation from the provider on every call (name lookups, locks),
 * and a context made and freed per hash adds two allocations; together
 * they cost more than hashing the key itself.  A worker hashes one thing
 * at a time in it (a body in a temp file, hashed across events, has a
 * context of its own), so one context is enough.
 */

static EVP_MD_CTX  *ngx_http_idempotency_md_ctx;

#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
static EVP_MD      *ngx_http_idempotency_md;
#else
static const EVP_MD  *ngx_http_idempotency_md;
#endif


ngx_int_t
ngx_http_idempotency_find_header(ngx_http_request_t *r, ngx_str_t *name,
    ngx_str_t *value)
{
    ngx_uint_t        i, n;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    n = 0;
    part = &r->headers_in.headers.part;
    i = 0;

    while ((h = ngx_http_idempotency_next_header(&part, &i)) != NULL) {
        if (h->key.len != name->len
            || ngx_strncasecmp(h->key.data, name->data, name->len) != 0)
        {
            continue;
        }

        if (n++) {
            return NGX_ERROR;
        }

        *value = h->value;
    }

    return n ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_http_idempotency_parse_key(ngx_pool_t *pool, ngx_str_t *raw,
    ngx_str_t *key, const char **reason)
{
    u_char      *p, *last, *d, c;
    ngx_uint_t   n;

    p = raw->data;
    last = p + raw->len;

    /* nginx already strips the optional white space around the value */

    if (p == last) {
        *reason = "the key is empty";
        return NGX_DECLINED;
    }

    if (*p != '"') {

        /*
         * Not an sf-String: the value itself is the key, as Stripe-style
         * clients send it ("order 42 for alice"): printable ASCII, inner
         * spaces allowed; an odd number of quotes is a broken string
         */

        for (n = 0; p < last; p++) {
            if (*p < 0x20 || *p >= 0x7f) {
                *reason = "the key has a byte that is not printable ASCII";
                return NGX_DECLINED;
            }

            if (*p == '"') {
                n++;
            }
        }

        if (n % 2) {
            *reason = "the key has an unbalanced quote";
            return NGX_DECLINED;
        }

        if (raw->len > NGX_HTTP_IDEMPOTENCY_KEY_MAX) {
            *reason = "the key is longer than 255 bytes";
            return NGX_DECLINED;
        }

        *key = *raw;
        return NGX_OK;
    }

    /* an sf-String: unescape into a copy */

    d = ngx_pnalloc(pool, raw->len);
    if (d == NULL) {
        return NGX_ERROR;
    }

    key->data = d;

    for (p++; /* void */; p++) {

        if (p == last) {
            *reason = "the quoted key has no closing quote";
            return NGX_DECLINED;
        }

        c = *p;

        if (c == '"') {
            break;
        }

        if (c == '\\') {
            if (++p == last || (*p != '"' && *p != '\\')) {
                *reason = "the quoted key has an escape other than "
                          "\\\" or \\\\";
                return NGX_DECLINED;
            }

            c = *p;

        } else if (c < 0x20 || c >= 0x7f) {
            *reason = "the key has a byte that is not printable ASCII";
            return NGX_DECLINED;
        }

        *d++ = c;
    }

    if (p + 1 != last) {
        *reason = "the quoted key is followed by other characters";
        return NGX_DECLINED;
    }

    key->len = d - key->data;

    if (key->len == 0) {
        *reason = "the key is empty";
        return NGX_DECLINED;
    }

    if (key->len > NGX_HTTP_IDEMPOTENCY_KEY_MAX) {
        *reason = "the key is longer than 255 bytes";
        return NGX_DECLINED;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_key_hash(ngx_str_t *scope, ngx_str_t *key, u_char *out)
{
    return ngx_http_idempotency_hash_framed("idempotency-key/1", scope, key,
                                            out);
}


ngx_int_t
ngx_http_idempotency_source_hash(ngx_str_t *scope, ngx_str_t *key,
    u_char *out)
{
    return ngx_http_idempotency_hash_framed("idempotency-src/1", scope, key,
                                            out);
}


/* domain, the scope's length, the scope, the key */

static ngx_int_t
ngx_http_idempotency_hash_framed(const char *domain, ngx_str_t *scope,
    ngx_str_t *key, u_char *out)
{
    u_char       len[4];
    EVP_MD_CTX  *md;

    md = ngx_http_idempotency_sha256();
    if (md == NULL) {
        return NGX_ERROR;
    }

    /* the scope's length first, so ("ab", "c") and ("a", "bc") differ */

    (void) ngx_http_idempotency_put_be(len, scope->len, 4);

    if (EVP_DigestUpdate(md, domain, ngx_strlen(domain)) == 1
        && EVP_DigestUpdate(md, len, 4) == 1
        && EVP_DigestUpdate(md, scope->data, scope->len) == 1
        && EVP_DigestUpdate(md, key->data, key->len) == 1
        && EVP_DigestFinal_ex(md, out, NULL) == 1)
    {
        return NGX_OK;
    }

    return NGX_ERROR;
}


ngx_int_t
ngx_http_idempotency_marker_hash(u_char *key_hash, u_char *life, u_char *out)
{
    EVP_MD_CTX  *md;

    if (life == NULL) {
        ngx_memcpy(out, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
        return NGX_OK;
    }

    md = ngx_http_idempotency_sha256();
    if (md == NULL) {
        return NGX_ERROR;
    }

    if (EVP_DigestUpdate(md, "idempotency-marker/1", 20) == 1
        && EVP_DigestUpdate(md, key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN) == 1
        && EVP_DigestUpdate(md, life, NGX_HTTP_IDEMPOTENCY_TOKEN_LEN) == 1
        && EVP_DigestFinal_ex(md, out, NULL) == 1)
    {
        return NGX_OK;
    }

    return NGX_ERROR;
}


ngx_int_t
ngx_http_idempotency_fingerprint(ngx_http_request_t *r,
    ngx_http_idempotency_fp_t *fp, u_char *out)
{
    ngx_int_t  rc;

    if (fp->md == NULL) {
        if (ngx_http_idempotency_fp_start(r, fp) != NGX_OK) {
            return NGX_ERROR;
        }

        ngx_http_idempotency_walk_init(&fp->walk, r,
                                       ngx_http_idempotency_fp_update, fp);
    }

    rc = ngx_http_idempotency_walk(&fp->walk);

    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_idempotency_fp_finish(fp, out);
}


ngx_int_t
ngx_http_idempotency_fp_start(ngx_http_request_t *r,
    ngx_http_idempotency_fp_t *fp)
{
    EVP_MD_CTX          *md;
    ngx_pool_cleanup_t  *cln;

    if (ngx_http_idempotency_body_in_file(r)) {

        /* a temp file: a context of its own, kept across events */

        cln = ngx_pool_cleanup_add(r->pool, 0);
        if (cln == NULL) {
            return NGX_ERROR;
        }

        md = EVP_MD_CTX_new();
        if (md == NULL) {
            return NGX_ERROR;
        }

        cln->handler = ngx_http_idempotency_fp_cleanup;
        cln->data = fp;
        fp->md = md;

        if (EVP_DigestInit_ex(md, ngx_http_idempotency_sha256_md(), NULL)
            != 1)
        {
            return NGX_ERROR;
        }

    } else {
        /* in memory: done at once, with the process's context */

        md = ngx_http_idempotency_sha256();
        if (md == NULL) {
            return NGX_ERROR;
        }

        fp->md = md;
    }

    /* method and URI end with a NUL, which neither may contain */

    if (EVP_DigestUpdate(md, "idempotency-fp/1", 16) != 1
        || EVP_DigestUpdate(md, r->method_name.data, r->method_name.len) != 1
        || EVP_DigestUpdate(md, "", 1) != 1
        || EVP_DigestUpdate(md, r->unparsed_uri.data, r->unparsed_uri.len)
           != 1
        || EVP_DigestUpdate(md, "", 1) != 1)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_fp_update(void *data, u_char *p, size_t len)
{
    ngx_http_idempotency_fp_t  *fp = data;

    return EVP_DigestUpdate(fp->md, p, len) == 1 ? NGX_OK : NGX_ERROR;
}


ngx_int_t
ngx_http_idempotency_fp_finish(ngx_http_idempotency_fp_t *fp, u_char *out)
{
    return EVP_DigestFinal_ex(fp->md, out, NULL) == 1 ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_idempotency_fp_cleanup(void *data)
{
    ngx_http_idempotency_fp_t  *fp = data;

    EVP_MD_CTX_free(fp->md);
    fp->md = NULL;
}


/* the process's SHA-256 implementation, fetched once */

static const EVP_MD *
ngx_http_idempotency_sha256_md(void)
{
    if (ngx_http_idempotency_md == NULL) {
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
        ngx_http_idempotency_md = EVP_MD_fetch(NULL, "SHA256", NULL);
#else
        ngx_http_idempotency_md = EVP_sha256();
#endif
    }

    return ngx_http_idempotency_md;
}


/* the process's SHA-256 context, initialized for a new hash */

static EVP_MD_CTX *
ngx_http_idempotency_sha256(void)
{
    const EVP_MD  *md;

    md = ngx_http_idempotency_sha256_md();
    if (md == NULL) {
        return NULL;
    }

    if (ngx_http_idempotency_md_ctx == NULL) {
        ngx_http_idempotency_md_ctx = EVP_MD_CTX_new();
        if (ngx_http_idempotency_md_ctx == NULL) {
            return NULL;
        }
    }

    if (EVP_DigestInit_ex(ngx_http_idempotency_md_ctx, md, NULL) != 1) {
        return NULL;
    }

    return ngx_http_idempotency_md_ctx;
}


/* process exit: the module is unloaded after this, and so are the
 * pointers to the context */

void
ngx_http_idempotency_key_exit(void)
{
    if (ngx_http_idempotency_md_ctx) {
        EVP_MD_CTX_free(ngx_http_idempotency_md_ctx);
        ngx_http_idempotency_md_ctx = NULL;
    }

#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
    if (ngx_http_idempotency_md) {
        EVP_MD_free(ngx_http_idempotency_md);
    }
#endif

    ngx_http_idempotency_md = NULL;
}
