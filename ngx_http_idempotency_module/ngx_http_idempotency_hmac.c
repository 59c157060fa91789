
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: HMAC-SHA256 from the OpenSSL nginx links,
 * its EVP_MAC API from OpenSSL 3 on (HMAC_CTX is deprecated there), the
 * HMAC_CTX one before.  The replay tiers sign their entries with it
 * (entry.c), and webhook deliveries are checked with it (signature.c).
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <openssl/evp.h>
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
#include <openssl/core_names.h>
#include <openssl/params.h>
#else
#include <openssl/hmac.h>
#endif

#include "ngx_http_idempotency_hmac.h"


static void ngx_http_idempotency_hmac_cleanup(void *data);


void *
ngx_http_idempotency_hmac_key(ngx_pool_t *pool, ngx_str_t *secret)
{
    void                *key;
    ngx_pool_cleanup_t  *cln;
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
    EVP_MAC             *mac;
    OSSL_PARAM           params[2];
#endif

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NULL;
    }

#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)

    mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) {
        return NULL;
    }

    key = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);

    if (key == NULL) {
        return NULL;
    }

    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                 (char *) "SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();

    if (EVP_MAC_init(key, secret->data, secret->len, params) != 1) {
        EVP_MAC_CTX_free(key);
        return NULL;
    }

#else

    key = HMAC_CTX_new();
    if (key == NULL) {
        return NULL;
    }

    if (HMAC_Init_ex(key, secret->data, secret->len, EVP_sha256(), NULL)
        != 1)
    {
        HMAC_CTX_free(key);
        return NULL;
    }

#endif

    cln->handler = ngx_http_idempotency_hmac_cleanup;
    cln->data = key;

    return key;
}


static void
ngx_http_idempotency_hmac_cleanup(void *data)
{
    ngx_http_idempotency_hmac_free(data);
}


void *
ngx_http_idempotency_hmac_start(void *key)
{
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)

    return EVP_MAC_CTX_dup(key);

#else

    HMAC_CTX  *h;

    h = HMAC_CTX_new();
    if (h == NULL) {
        return NULL;
    }

    if (HMAC_CTX_copy(h, key) != 1) {
        HMAC_CTX_free(h);
        return NULL;
    }

    return h;

#endif
}


ngx_int_t
ngx_http_idempotency_hmac_update(void *h, u_char *p, size_t len)
{
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
    return EVP_MAC_update(h, p, len) == 1 ? NGX_OK : NGX_ERROR;
#else
    return HMAC_Update(h, p, len) == 1 ? NGX_OK : NGX_ERROR;
#endif
}


ngx_int_t
ngx_http_idempotency_hmac_finish(void *h, u_char *tag)
{
    ngx_int_t  rc;
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
    size_t        len;

    rc = (EVP_MAC_final(h, tag, &len, NGX_HTTP_IDEMPOTENCY_HMAC_LEN) == 1
          && len == NGX_HTTP_IDEMPOTENCY_HMAC_LEN)
         ? NGX_OK : NGX_ERROR;
#else
    unsigned int  len;

    rc = (HMAC_Final(h, tag, &len) == 1
          && len == NGX_HTTP_IDEMPOTENCY_HMAC_LEN)
         ? NGX_OK : NGX_ERROR;
#endif

    ngx_http_idempotency_hmac_free(h);

    return rc;
}


void
ngx_http_idempotency_hmac_free(void *h)
{
#if (OPENSSL_VERSION_NUMBER >= 0x30000000L)
    EVP_MAC_CTX_free(h);
#else
    HMAC_CTX_free(h);
#endif
}
