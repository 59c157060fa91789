
/*
 * ngx_http_idempotency_module: the replay tier entry.
 *
 * The bytes come back from Redis, which anyone with access may have
 * written to: every length is checked before it is used.
 */


#include "ngx_http_idempotency_entry.h"


u_char *
ngx_http_idempotency_entry_head(u_char *p, ngx_uint_t flags,
    u_char *fingerprint, time_t expires, size_t record_len)
{
    ngx_uint_t  i;
    uint64_t    t;

    p = ngx_cpymem(p, NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC,
                   sizeof(NGX_HTTP_IDEMPOTENCY_ENTRY_MAGIC) - 1);
    *p++ = NGX_HTTP_IDEMPOTENCY_ENTRY_VERSION;
    *p++ = (u_char) (flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FP);
    *p++ = 0;
    *p++ = 0;
    *p++ = 0;

    t = (uint64_t) (expires > 0 ? expires : 0);

    for (i = 0; i < 8; i++) {
        *p++ = (u_char) (t >> (56 - 8 * i));
    }

    if (flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FP) {
        p = ngx_cpymem(p, fingerprint, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    } else {
        ngx_memzero(p, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
        p += NGX_HTTP_IDEMPOTENCY_HASH_LEN;
    }

    *p++ = (u_char) (record_len >> 24);
    *p++ = (u_char) (record_len >> 16);
    *p++ = (u_char) (record_len >> 8);
    *p++ = (u_char) record_len;

    return p;
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

    if ((p[4] & ~NGX_HTTP_IDEMPOTENCY_ENTRY_FP) || p[5] || p[6] || p[7]) {
        *why = "unknown flags";
        return NGX_ERROR;
    }

    e->flags = p[4];
    p += 8;

    t = 0;

    for (i = 0; i < 8; i++) {
        t = (t << 8) | *p++;
    }

    if (t == 0 || t > (uint64_t) NGX_MAX_TIME_T_VALUE) {
        *why = "bad expiry";
        return NGX_ERROR;
    }

    e->expires = (time_t) t;

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

    rlen = ((size_t) p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
    p += 4;

    if (rlen != len - NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN) {
        *why = "record length does not match";
        return NGX_ERROR;
    }

    e->raw.data = p;
    e->raw.len = rlen;

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
