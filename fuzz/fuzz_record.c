
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * libFuzzer target: the stored-record decoder
 * ngx_http_idempotency_record_parse() on arbitrary bytes (what a store
 * row may hold), then ngx_http_idempotency_record_apply() of what it
 * accepted onto a fake request.  TEST-ONLY.
 *
 * Checks, on NGX_OK:
 *   - the status is 100..999;
 *   - every header name, value and the body lie inside the input, names
 *     are not empty, and the slices follow each other in input order;
 *   - encoding the parsed record again (format 1, 2 or 3, as documented
 *     in ngx_http_idempotency_record.h) gives back exactly the input: the
 *     decoder accepts nothing but the canonical encoding;
 *   - apply sets the status and Content-Length (a ":length" field's, if
 *     any), takes the Content-Type and the pseudo-headers (":status",
 *     ":length", ":location", ":override-charset") out of the list and
 *     pushes every other header, in order, and a format 3 record's
 *     trailers, in order, with no Content-Length (but for a HEAD).
 * AddressSanitizer catches any read outside the (exactly sized) input.
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


#define fuzz_inside(s)                                                        \
    fuzz_assert((s).data >= in && (s).len <= size                             \
                && (s).data - in <= (ptrdiff_t) (size - (s).len))


static u_char *
fuzz_put(u_char *p, size_t n, size_t bytes)
{
    while (bytes--) {
        *p++ = (u_char) (n >> (8 * bytes));
    }

    return p;
}


/* fields in the input, in order, from next on: where they end; their
 * encoded size is added to *elen */

static u_char *
fuzz_fields(u_char *in, size_t size, ngx_array_t *a, u_char *next,
    size_t *elen)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    kv = a->elts;

    for (i = 0; i < a->nelts; i++) {
        fuzz_inside(kv[i].key);
        fuzz_inside(kv[i].value);
        fuzz_assert(kv[i].key.len > 0 && kv[i].key.len <= 0xffff);
        fuzz_assert(kv[i].key.data == next + 2);
        fuzz_assert(kv[i].value.data == kv[i].key.data + kv[i].key.len + 4);
        next = kv[i].value.data + kv[i].value.len;
        *elen += 2 + kv[i].key.len + 4 + kv[i].value.len;
    }

    return next;
}


static u_char *
fuzz_put_fields(u_char *p, ngx_array_t *a)
{
    ngx_uint_t     i;
    ngx_keyval_t  *kv;

    kv = a->elts;

    for (i = 0; i < a->nelts; i++) {
        p = fuzz_put(p, kv[i].key.len, 2);
        p = ngx_cpymem(p, kv[i].key.data, kv[i].key.len);
        p = fuzz_put(p, kv[i].value.len, 4);
        p = ngx_cpymem(p, kv[i].value.data, kv[i].value.len);
    }

    return p;
}


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ngx_fuzz_init();
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                          *in, *enc, *p, *next;
    off_t                            clen;
    ngx_str_t                       *oc;
    size_t                           elen;
    ngx_int_t                        rc;
    ngx_uint_t                       i, j, ct, nct, sl;
    ngx_pool_t                      *pool;
    ngx_keyval_t                    *kv, *tv;
    ngx_list_part_t                 *part;
    ngx_table_elt_t                 *h;
    ngx_http_request_t              *r;
    const char                      *why;
    ngx_http_idempotency_record_t    rec;

    in = malloc(size ? size : 1);
    memcpy(in, data, size);

    pool = ngx_fuzz_pool();
    ngx_memzero(&rec, sizeof(rec));

    rc = ngx_http_idempotency_record_parse(pool, in, size, &rec);

    fuzz_assert(rc == NGX_OK || rc == NGX_ERROR);
    fuzz_assert(memcmp(in, data, size) == 0);

    if (rc != NGX_OK) {
        goto done;
    }

    fuzz_assert(rec.status >= 100 && rec.status <= 999);

    /* what the validator lets through can be sent to a client */

    why = NULL;

    if (ngx_http_idempotency_record_validate(&rec, &why) == NGX_OK) {
        fuzz_assert(rec.status >= 100 && rec.status <= 599);

        kv = rec.headers.elts;

        for (i = 0; i < rec.headers.nelts; i++) {
            fuzz_assert(memchr(kv[i].value.data, '\r', kv[i].value.len)
                        == NULL);
            fuzz_assert(memchr(kv[i].value.data, '\n', kv[i].value.len)
                        == NULL);
            fuzz_assert(memchr(kv[i].value.data, '\0', kv[i].value.len)
                        == NULL);
            fuzz_assert(memchr(kv[i].key.data, ' ', kv[i].key.len) == NULL);
            fuzz_assert(!(kv[i].key.len == 14
                          && strncasecmp((char *) kv[i].key.data,
                                         "Content-Length", 14) == 0));
        }

    } else {
        fuzz_assert(why != NULL);
    }

    /* slices inside the input, in order, and the canonical encoding */

    kv = rec.headers.elts;
    elen = 4 + 2 + 2 + 4 + rec.body.len;
    next = in + 8;

    next = fuzz_fields(in, size, &rec.headers, next, &elen);

    fuzz_inside(rec.body);
    fuzz_assert(rec.body.data == next + 4);
    fuzz_assert(rec.headers.nelts <= 0xffff);

    /* format 3: one trailer at least after the body; else none */

    tv = rec.trailers.elts;
    next = rec.body.data + rec.body.len;

    if (memcmp(in, "IDR3", 4) == 0) {
        fuzz_assert(rec.trailers.nelts > 0 && rec.trailers.nelts <= 0xffff);
        elen += 2;
        next += 2;

    } else {
        fuzz_assert(rec.trailers.nelts == 0);
    }

    next = fuzz_fields(in, size, &rec.trailers, next, &elen);

    fuzz_assert(next == in + size);
    fuzz_assert(elen == size);

    fuzz_assert(memcmp(in, "IDR1", 4) == 0 || memcmp(in, "IDR2", 4) == 0
                || memcmp(in, "IDR3", 4) == 0);

    enc = malloc(elen);
    p = ngx_cpymem(enc, in, 4);
    p = fuzz_put(p, rec.status, 2);
    p = fuzz_put(p, rec.headers.nelts, 2);

    p = fuzz_put_fields(p, &rec.headers);

    p = fuzz_put(p, rec.body.len, 4);
    p = ngx_cpymem(p, rec.body.data, rec.body.len);

    if (rec.trailers.nelts) {
        p = fuzz_put(p, rec.trailers.nelts, 2);
    }

    p = fuzz_put_fields(p, &rec.trailers);

    fuzz_assert((size_t) (p - enc) == elen);

    if (memcmp(enc, in, size) != 0) {
        fuzz_dump("input", in, size);
        fuzz_dump("re-encoded", enc, elen);
        fuzz_assert(0 && "re-encoding gives back the input");
    }

    free(enc);

    /* apply onto a fake request, a list of one-element parts */

    r = ngx_fuzz_request(pool);

    /* a HEAD or a POST retry, as the input's length says */
    r->method = (size & 1) ? NGX_HTTP_HEAD : NGX_HTTP_POST;

    if (ngx_list_init(&r->headers_out.headers, pool, 1,
                      sizeof(ngx_table_elt_t))
        != NGX_OK
        || ngx_list_init(&r->headers_out.trailers, pool, 1,
                         sizeof(ngx_table_elt_t))
           != NGX_OK)
    {
        abort();
    }

    fuzz_assert(ngx_http_idempotency_record_apply(r, &rec) == NGX_OK);

    fuzz_assert(r->headers_out.status == rec.status);

    /* a 204 or 304 without a body replays without Content-Length; for a
     * HEAD, the last ":length" field says otherwise (empty: none) */

    clen = (rec.body.len == 0 && (rec.status == NGX_HTTP_NO_CONTENT
                                  || rec.status == NGX_HTTP_NOT_MODIFIED))
           ? -1 : (off_t) rec.body.len;

    for (i = 0; i < rec.headers.nelts; i++) {
        if (r->method == NGX_HTTP_HEAD
            && kv[i].key.len == 7 && memcmp(kv[i].key.data, ":length", 7) == 0)
        {
            clen = kv[i].value.len ? ngx_atoof(kv[i].value.data,
                                               kv[i].value.len)
                                   : -1;
        }
    }

    if (rec.trailers.nelts && r->method != NGX_HTTP_HEAD) {
        clen = -1;
    }

    fuzz_assert(r->headers_out.content_length_n == clen);

    /* the trailers, in order, one list part each */

    part = &r->headers_out.trailers.part;
    h = part->elts;
    j = 0;

    for (i = 0; r->method != NGX_HTTP_HEAD && i < rec.trailers.nelts; i++) {
        if (j >= part->nelts) {
            fuzz_assert(part->next != NULL);
            part = part->next;
            h = part->elts;
            j = 0;
        }

        fuzz_assert(h[j].key.data == tv[i].key.data
                    && h[j].value.data == tv[i].value.data
                    && h[j].value.len == tv[i].value.len);
        j++;
    }

    fuzz_assert(j == part->nelts && part->next == NULL);
    fuzz_assert(r->expect_trailers
                == (rec.trailers.nelts && r->method != NGX_HTTP_HEAD));

    nct = 0;
    ct = 0;
    sl = 0;
    oc = NULL;
    part = &r->headers_out.headers.part;
    h = part->elts;
    j = 0;

    for (i = 0; i < rec.headers.nelts; i++) {

        if (kv[i].key.len == 7 && memcmp(kv[i].key.data, ":status", 7) == 0) {
            sl = i + 1;
            continue;
        }

        if (kv[i].key.len == 17
            && memcmp(kv[i].key.data, ":override-charset", 17) == 0)
        {
            oc = &kv[i].value;
            continue;
        }

        if ((kv[i].key.len == 7 && memcmp(kv[i].key.data, ":length", 7) == 0)
            || (kv[i].key.len == 9
                && memcmp(kv[i].key.data, ":location", 9) == 0))
        {
            continue;
        }

        if (kv[i].key.len == 12
            && ngx_strncasecmp(kv[i].key.data, (u_char *) "Content-Type", 12)
               == 0)
        {
            ct = i + 1;
            nct++;
            continue;
        }

        if (j >= part->nelts) {
            fuzz_assert(part->next != NULL);
            part = part->next;
            h = part->elts;
            j = 0;
        }

        fuzz_assert(h[j].hash != 0);
        fuzz_assert(h[j].key.data == kv[i].key.data
                    && h[j].key.len == kv[i].key.len);
        fuzz_assert(h[j].value.data == kv[i].value.data
                    && h[j].value.len == kv[i].value.len);
        j++;
    }

    fuzz_assert(j == part->nelts && part->next == NULL);

    if (ct) {
        fuzz_assert(r->headers_out.content_type.data == kv[ct - 1].value.data
                    && r->headers_out.content_type.len
                       == kv[ct - 1].value.len);
    } else {
        fuzz_assert(r->headers_out.content_type.len == 0);
    }

    fuzz_assert(r->headers_out.override_charset == oc);

    if (sl) {
        fuzz_assert(r->headers_out.status_line.data == kv[sl - 1].value.data
                    && r->headers_out.status_line.len
                       == kv[sl - 1].value.len);
    } else {
        fuzz_assert(r->headers_out.status_line.len == 0);
    }

done:

    ngx_destroy_pool(pool);
    free(in);

    return 0;
}
