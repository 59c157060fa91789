
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the replay tier entry.
 *
 * The bytes come back from Redis, which anyone with access may have
 * written to: every length is checked before it is used.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <openssl/crypto.h>

#include "ngx_http_idempotency_entry.h"
#include "ngx_http_idempotency_hmac.h"


/* what an entry's tag covers first: no other tag of the module starts so */
#define NGX_HTTP_IDEMPOTENCY_ENTRY_DOMAIN  "idempotency-entry/2"

#define NGX_HTTP_IDEMPOTENCY_ENTRY_FLAGS                                     \
    (NGX_HTTP_IDEMPOTENCY_ENTRY_FP|NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN)


static ngx_int_t ngx_http_idempotency_mac_parts(void *key, ngx_str_t *parts,
    ngx_uint_t n, u_char *tag);


u_char *
ngx_http_idempotency_entry_head(u_char *p, ngx_uint_t flags,
    u_char *fingerprint, ngx_uint_t epoch, time_t expires,
    size_t record_len)
{
    p = ngx_cpymem(p, NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC,
                   sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC) - 1);
    *p++ = NGX_HTTP_IDEMPOTENCY_ENTRY_VERSION;
    *p++ = (u_char) (flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FLAGS);
    *p++ = 0;
    *p++ = 0;
    *p++ = 0;

    p = ngx_http_idempotency_put_be(p, expires > 0 ? expires : 0, 8);
    p = ngx_http_idempotency_put_be(p, epoch, 4);

    if (flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FP) {
        p = ngx_cpymem(p, fingerprint, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    } else {
        ngx_memzero(p, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
        p += NGX_HTTP_IDEMPOTENCY_HASH_LEN;
    }

    return ngx_http_idempotency_put_be(p, record_len, 4);
}


ngx_int_t
ngx_http_idempotency_entry_parse(ngx_pool_t *pool, u_char *data, size_t len,
    ngx_http_idempotency_entry_t *e, const char **why)
{
    u_char      *p;
    size_t       rlen;
    uint64_t     t;
    ngx_uint_t   i;

    p = data;

    if (len < sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC)
        || ngx_memcmp(p, NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC,
                      sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC) - 1)
           != 0)
    {
        *why = "not an entry (bad magic)";
        return NGX_ERROR;
    }

    if (p[3] != NGX_HTTP_IDEMPOTENCY_ENTRY_VERSION) {
        *why = "an entry of another format version";
        return NGX_DECLINED;
    }

    if (len < NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN) {
        *why = "truncated entry";
        return NGX_ERROR;
    }

    if ((p[4] & ~NGX_HTTP_IDEMPOTENCY_ENTRY_FLAGS) || p[5] || p[6] || p[7]
        || p[4] == NGX_HTTP_IDEMPOTENCY_ENTRY_FLAGS)
    {
        *why = "unknown flags";
        return NGX_ERROR;
    }

    e->flags = p[4];
    p += 8;

    t = ngx_http_idempotency_get_be(p, 8);
    p += 8;

    if (t == 0 || t > (uint64_t) NGX_MAX_TIME_T_VALUE) {
        *why = "bad expiry";
        return NGX_ERROR;
    }

    e->expires = (time_t) t;

    e->epoch = ngx_http_idempotency_get_be(p, 4);
    p += 4;

    if (e->epoch == 0) {
        *why = "epoch 0";
        return NGX_ERROR;
    }

    e->fingerprint = p;

    if (!(e->flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FP)) {
        for (i = 0; i < NGX_HTTP_IDEMPOTENCY_HASH_LEN; i++) {
            if (p[i]) {
                *why = "a fingerprint without its flag";
                return NGX_ERROR;
            }
        }
    }

    p += NGX_HTTP_IDEMPOTENCY_HASH_LEN;

    rlen = ngx_http_idempotency_get_be(p, 4);
    p += 4;

    if (rlen != len - NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN) {
        *why = "record length does not match";
        return NGX_ERROR;
    }

    if (e->flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN) {

        /* a mark: nothing to replay */

        if (rlen) {
            *why = "a forgotten mark with a record";
            return NGX_ERROR;
        }

        ngx_memzero(&e->record, sizeof(ngx_http_idempotency_record_t));

        return NGX_OK;
    }

    if (ngx_http_idempotency_record_parse(pool, p, rlen, &e->record)
        != NGX_OK)
    {
        *why = "malformed record";
        return NGX_ERROR;
    }

    if (ngx_http_idempotency_record_validate(&e->record, why) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_entry_version(u_char *data, size_t len)
{
    if (len < sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC)
        || ngx_memcmp(data, NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC,
                      sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC) - 1)
           != 0
        || data[3] != NGX_HTTP_IDEMPOTENCY_ENTRY_VERSION)
    {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_entry_peek(u_char *data, size_t len, ngx_uint_t *epoch,
    ngx_uint_t *flags)
{
    if (len < NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN
        || ngx_http_idempotency_entry_version(data, len) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    *flags = data[4];
    *epoch = ngx_http_idempotency_get_be(data + 16, 4);

    return NGX_OK;
}


/*
 * A keyed context is made once; each tag is computed on a copy of it, so
 * the key schedule is not redone per entry.
 */

void *
ngx_http_idempotency_entry_key(ngx_pool_t *pool, ngx_str_t *secret)
{
    return ngx_http_idempotency_hmac_key(pool, secret);
}


static ngx_int_t
ngx_http_idempotency_mac_parts(void *key, ngx_str_t *parts, ngx_uint_t n,
    u_char *tag)
{
    void        *h;
    ngx_uint_t   i;

    h = ngx_http_idempotency_hmac_start(key);
    if (h == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_idempotency_hmac_update(h, parts[i].data, parts[i].len)
            != NGX_OK)
        {
            ngx_http_idempotency_hmac_free(h);
            return NGX_ERROR;
        }
    }

    return ngx_http_idempotency_hmac_finish(h, tag);
}


ngx_int_t
ngx_http_idempotency_mac(void *key, u_char *head, size_t hlen, u_char *data,
    size_t len, u_char *tag)
{
    ngx_str_t  parts[2];

    parts[0].data = head;
    parts[0].len = hlen;
    parts[1].data = data;
    parts[1].len = len;

    return ngx_http_idempotency_mac_parts(key, parts, 2, tag);
}


/*
 * The store's names are in the tag, each after its length: an entry
 * copied to another store's key (another table, database or store that
 * shares the secret and the Redis) does not verify there.
 */

ngx_int_t
ngx_http_idempotency_entry_sign(void *key,
    ngx_http_idempotency_store_t *store, u_char *key_hash, u_char *data,
    size_t len, u_char *tag)
{
    u_char     *p;
    ngx_str_t   parts[7];
    u_char      lens[6];

    p = ngx_http_idempotency_put_be(lens, store->name.len & 0xffff, 2);
    p = ngx_http_idempotency_put_be(p, store->database.len & 0xffff, 2);
    (void) ngx_http_idempotency_put_be(p, store->table.len & 0xffff, 2);

    ngx_str_set(&parts[0], NGX_HTTP_IDEMPOTENCY_ENTRY_DOMAIN);
    parts[1].data = lens;
    parts[1].len = sizeof(lens);
    parts[2] = store->name;
    parts[3] = store->database;
    parts[4] = store->table;
    parts[5].data = key_hash;
    parts[5].len = NGX_HTTP_IDEMPOTENCY_HASH_LEN;
    parts[6].data = data;
    parts[6].len = len;

    return ngx_http_idempotency_mac_parts(key, parts, 7, tag);
}


ngx_int_t
ngx_http_idempotency_entry_verify(ngx_http_idempotency_store_t *store,
    u_char *key_hash, u_char *data, size_t len)
{
    void        **key;
    size_t        n;
    ngx_uint_t    i;
    u_char        tag[NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN];

    if (len < NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN) {
        return NGX_DECLINED;
    }

    n = len - NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN;
    key = store->secrets->elts;

    /* the newest secret first: after a rotation, old tags age out */

    for (i = 0; i < store->secrets->nelts; i++) {
        if (ngx_http_idempotency_entry_sign(key[i], store, key_hash, data, n,
                                            tag)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (CRYPTO_memcmp(tag, data + n, NGX_HTTP_IDEMPOTENCY_ENTRY_TAG_LEN)
            == 0)
        {
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}
