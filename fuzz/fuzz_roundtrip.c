
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * libFuzzer target: the stored-record round trip.  A fake response
 * (status, Content-Type, charset, a header list with repeated, deleted
 * and hop-by-hop headers, a body) is encoded with
 * ngx_http_idempotency_record_head() plus the body framing
 * ngx_http_idempotency_record_body_len(), as the capture filter and the
 * store do, and decoded back with ngx_http_idempotency_record_parse().
 * TEST-ONLY.
 *
 * Input: h[0..1] status (100 + n % 900), h[2] flags (1 Content-Type,
 * 2 content_type_len == content_type.len, 4 charset, 8 a list of
 * one-element parts, 16 a status line), then strings: [Content-Type]
 * [charset] [status line] body, and
 * headers until the input ends: a flag byte (1: hash 0, i.e. deleted),
 * a name, a value.  A string is a length byte L and L bytes, or, for
 * L >= 0xf0, a u16 count and a fill byte: count * (L - 0xef) copies, so
 * that long names and values are cheap to reach (160 KiB of such fill per
 * input at most).
 *
 * Checks: record_head() fails only when a live header's name, the status
 * line or the Content-Type is longer than 65535 bytes (the filter then
 * releases the key), and declines only a response no replay may send (a
 * status over 599, a name that is not a token, CR/LF/NUL in a value: the
 * key is then recorded as executed, not stored); otherwise the encoding
 * parses; the status and body come back; the headers
 * come back as the header filter would have sent them: first the status
 * line (as a ":status" pseudo-header), then the Content-Type line (with "; charset=..." when nginx would add it), then
 * every live header in order except the hop-by-hop and regenerated ones
 * (the list ngx_http_idempotency_record.c documents).
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_record.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct {
    const u_char  *p;
    const u_char  *last;
    size_t         budget;     /* bytes the fill strings may still make */
} fuzz_in_t;


/* enough for one name past format 1's 16-bit limit, and still fast */
#define FUZZ_FILL_BUDGET  (160 * 1024)


/* dropped from a stored response (see ngx_http_idempotency_record.c) */
static const char  *fuzz_dropped[] = {
    "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding",
    "TE", "Trailer", "Upgrade", "Content-Length", "Content-Type", "Date",
    "Server", "Idempotent-Replayed", NULL
};


static ngx_int_t
fuzz_string(ngx_pool_t *pool, fuzz_in_t *in, ngx_str_t *s)
{
    size_t  l, n, count;
    u_char  fill;

    if (in->p == in->last) {
        return NGX_DECLINED;
    }

    l = *in->p++;

    if (l >= 0xf0) {
        if (in->last - in->p < 3) {
            return NGX_DECLINED;
        }

        count = (size_t) in->p[0] << 8 | in->p[1];
        fill = in->p[2];
        in->p += 3;

        n = ngx_min(count * (l - 0xef), in->budget);
        in->budget -= n;
        s->data = ngx_pnalloc(pool, n);
        if (s->data == NULL && n) {
            abort();
        }
        ngx_memset(s->data, fill, n);
        s->len = n;

        return NGX_OK;
    }

    n = ngx_min(l, (size_t) (in->last - in->p));

    /* an exactly sized copy */
    s->data = ngx_pnalloc(pool, n);
    ngx_memcpy(s->data, in->p, n);
    s->len = n;
    in->p += n;

    return NGX_OK;
}


/* what no replay may carry (RFC 9110 tchar names, no CR/LF/NUL), written
 * apart from the module's ngx_http_idempotency_header_bad() */
static ngx_uint_t
fuzz_unsendable(ngx_str_t *name, ngx_str_t *value)
{
    size_t  i;

    /* format 2's fields: a decimal length (19 digits at most) or none;
     * an empty mark; a charset, a value like any other */

    if (name->len == 7 && memcmp(name->data, ":length", 7) == 0) {
        if (value->len > 19) {
            return 1;
        }

        for (i = 0; i < value->len; i++) {
            if (!isdigit(value->data[i])) {
                return 1;
            }
        }

        return 0;
    }

    if (name->len == 9 && memcmp(name->data, ":location", 9) == 0) {
        return value->len != 0;
    }

    if (!(name->len == 7 && memcmp(name->data, ":status", 7) == 0)
        && !(name->len == 17 && memcmp(name->data, ":override-charset", 17)
                                == 0))
    {
        for (i = 0; i < name->len; i++) {
            if (!isalnum(name->data[i])
                && (name->data[i] == '\0'
                    || strchr("!#$%&'*+-.^_`|~", name->data[i]) == NULL))
            {
                return 1;
            }
        }
    }

    if (value->len == 0) {
        return 0;
    }

    return memchr(value->data, '\r', value->len) != NULL
           || memchr(value->data, '\n', value->len) != NULL
           || memchr(value->data, '\0', value->len) != NULL;
}


static ngx_uint_t
fuzz_is_dropped(ngx_str_t *name)
{
    size_t       n;
    const char **d;

    for (d = fuzz_dropped; *d; d++) {
        n = strlen(*d);
        if (n == name->len
            && ngx_strncasecmp(name->data, (u_char *) *d, n) == 0)
        {
            return 1;
        }
    }

    return 0;
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
    u_char                          *rec, *p, *ctv;
    size_t                           len, ctlen;
    fuzz_in_t                        in;
    ngx_int_t                        rc;
    ngx_str_t                        head, body, name, value;
    ngx_uint_t                       flags, i, nexp, nh, hflags;
    ngx_uint_t                       unrecordable, unsendable;
    ngx_pool_t                      *pool;
    ngx_keyval_t                    *kv;
    ngx_table_elt_t                 *h, **hs;
    ngx_http_request_t              *r;
    ngx_http_idempotency_record_t    out;

    if (size < 3) {
        return 0;
    }

    pool = ngx_fuzz_pool();
    r = ngx_fuzz_request(pool);

    r->headers_out.status = 100 + (((ngx_uint_t) data[0] << 8 | data[1]) % 900);
    flags = data[2];

    in.p = data + 3;
    in.last = data + size;
    in.budget = FUZZ_FILL_BUDGET;

    if (ngx_list_init(&r->headers_out.headers, pool, (flags & 8) ? 1 : 20,
                      sizeof(ngx_table_elt_t))
        != NGX_OK)
    {
        abort();
    }

    if ((flags & 1)
        && fuzz_string(pool, &in, &r->headers_out.content_type) == NGX_OK)
    {
        /* the header filter adds the charset only when content_type_len
         * is the whole content_type (no charset in the type already) */
        r->headers_out.content_type_len = (flags & 2)
                                          ? r->headers_out.content_type.len
                                          : r->headers_out.content_type.len
                                            / 2;
    }

    if (flags & 4) {
        (void) fuzz_string(pool, &in, &r->headers_out.charset);
    }

    if (flags & 16) {
        (void) fuzz_string(pool, &in, &r->headers_out.status_line);
    }

    /* the module's own limits: 16-bit framing for the status line and
     * the Content-Type (stricter than format 1's 32-bit values) */
    unrecordable = r->headers_out.status_line.len > 0xffff
                   || r->headers_out.content_type.len > 0xffff;

    /* what the module never stores, since no replay may send it */
    {
        ngx_str_t  sl = ngx_string(":status"), ct = ngx_string("X");

        unsendable = r->headers_out.status > 599
                     || fuzz_unsendable(&sl, &r->headers_out.status_line)
                     || fuzz_unsendable(&ct, &r->headers_out.content_type)
                     || fuzz_unsendable(&ct, &r->headers_out.charset);
    }

    ngx_str_set(&body, "");
    (void) fuzz_string(pool, &in, &body);

    /* the headers, and the ones expected back */

    hs = ngx_pcalloc(pool, sizeof(ngx_table_elt_t *) * (size + 1));
    nh = 0;

    while (in.p < in.last) {
        hflags = *in.p++;

        if (fuzz_string(pool, &in, &name) != NGX_OK) {
            break;
        }

        if (name.len == 0) {
            /* nginx never has a header without a name */
            ngx_str_set(&name, "X");
        }

        /* as nginx's, an empty value still points somewhere */
        ngx_str_set(&value, "");
        (void) fuzz_string(pool, &in, &value);

        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            abort();
        }

        h->hash = (hflags & 1) ? 0 : 1;
        h->key = name;
        h->value = value;
        h->lowcase_key = NULL;

        hs[nh++] = h;

        /* format 1 has 16 bits for a name's length */
        if (h->hash && !fuzz_is_dropped(&name) && name.len > 0xffff) {
            unrecordable = 1;
        }

        if (h->hash && !fuzz_is_dropped(&name)
            && fuzz_unsendable(&name, &value))
        {
            unsendable = 1;
        }
    }

    /* encode: the header block, the body framing, the body */

    rc = ngx_http_idempotency_record_head(r, pool, NULL, &head);

    if (rc == NGX_DECLINED) {
        /* declining is right only for what no replay may send */
        fuzz_assert(unsendable);
        goto done;
    }

    if (rc != NGX_OK) {
        /* refusing is right only for what format 1 cannot hold */
        fuzz_assert(rc == NGX_ERROR);
        fuzz_assert(unrecordable);
        goto done;
    }

    fuzz_assert(!unsendable);

    len = head.len + 4 + body.len;
    rec = malloc(len);
    p = ngx_cpymem(rec, head.data, head.len);
    ngx_http_idempotency_record_body_len(p, body.len);
    p += 4;
    p = ngx_cpymem(p, body.data, body.len);

    /* decode */

    ngx_memzero(&out, sizeof(out));
    rc = ngx_http_idempotency_record_parse(pool, rec, len, &out);

    if (rc != NGX_OK) {
        fprintf(stderr, "a record made by record_head() does not parse "
                "(status %u, %u headers, body %zu)\n",
                (unsigned) r->headers_out.status, (unsigned) nh, body.len);
        for (i = 0; i < nh; i++) {
            fprintf(stderr, "header %u: name %zu bytes, value %zu bytes%s\n",
                    (unsigned) i, hs[i]->key.len, hs[i]->value.len,
                    hs[i]->hash ? "" : " (deleted)");
        }
        fuzz_dump("record", rec, len);
        fuzz_assert(0 && "an encoded record parses");
    }

    fuzz_assert(out.status == r->headers_out.status);
    fuzz_assert(out.body.len == body.len
                && memcmp(out.body.data, body.data, body.len) == 0);

    kv = out.headers.elts;
    nexp = 0;

    if (r->headers_out.status_line.len) {
        fuzz_assert(out.headers.nelts >= 1);
        fuzz_assert(kv[0].key.len == 7
                    && memcmp(kv[0].key.data, ":status", 7) == 0);
        fuzz_assert(kv[0].value.len == r->headers_out.status_line.len
                    && memcmp(kv[0].value.data,
                              r->headers_out.status_line.data,
                              kv[0].value.len) == 0);
        nexp = 1;
    }

    if (r->headers_out.content_type.len) {
        ctlen = r->headers_out.content_type.len;
        ctv = NULL;

        if (r->headers_out.content_type_len == r->headers_out.content_type.len
            && r->headers_out.charset.len)
        {
            ctlen += sizeof("; charset=") - 1 + r->headers_out.charset.len;
            ctv = malloc(ctlen);
            p = ngx_cpymem(ctv, r->headers_out.content_type.data,
                           r->headers_out.content_type.len);
            p = ngx_cpymem(p, "; charset=", sizeof("; charset=") - 1);
            ngx_memcpy(p, r->headers_out.charset.data,
                       r->headers_out.charset.len);
        }

        fuzz_assert(out.headers.nelts >= nexp + 1);
        fuzz_assert(kv[nexp].key.len == 12
                    && memcmp(kv[nexp].key.data, "Content-Type", 12) == 0);
        fuzz_assert(kv[nexp].value.len == ctlen);
        fuzz_assert(memcmp(kv[nexp].value.data,
                           ctv ? ctv : r->headers_out.content_type.data,
                           ctlen) == 0);
        free(ctv);
        nexp++;
    }

    for (i = 0; i < nh; i++) {
        if (hs[i]->hash == 0 || fuzz_is_dropped(&hs[i]->key)) {
            continue;
        }

        if (nexp >= out.headers.nelts
            || kv[nexp].key.len != hs[i]->key.len
            || memcmp(kv[nexp].key.data, hs[i]->key.data, hs[i]->key.len)
               != 0
            || kv[nexp].value.len != hs[i]->value.len
            || memcmp(kv[nexp].value.data, hs[i]->value.data,
                      hs[i]->value.len) != 0)
        {
            fprintf(stderr, "header %u (name %zu bytes, value %zu bytes) "
                    "does not come back as record entry %u of %u\n",
                    (unsigned) i, hs[i]->key.len, hs[i]->value.len,
                    (unsigned) nexp, (unsigned) out.headers.nelts);
            fuzz_dump("name", hs[i]->key.data, hs[i]->key.len);
            fuzz_assert(0 && "every live header comes back, in order");
        }

        nexp++;
    }

    fuzz_assert(nexp == out.headers.nelts);

    free(rec);

done:

    ngx_destroy_pool(pool);

    return 0;
}
