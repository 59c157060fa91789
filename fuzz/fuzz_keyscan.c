
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * libFuzzer target: the key's body sources (keyscan.c, json.c over
 * yajl): "idempotency_key"'s sources parsed, a body scanned in pieces,
 * the parts composed into the key.  TEST-ONLY.
 *
 * Input: h[0] flags, h[1] max_body (0: 1m, else h[1] * 8 bytes), h[2]
 * the number of pieces (mod 16), then the sources, one a line, up to a
 * NUL, then the body.  The pieces' ends are drawn from the body's own
 * bytes, so that every split is reachable.
 *
 * Checks:
 *   - a source is a body source, a complex value or refused, never a
 *     crash; at most 8 of them;
 *   - the body scanned whole and scanned in pieces gives every source the
 *     same outcome, value and reason (yajl's offsets included);
 *   - a form field's outcome and value are those of a plain decoder of
 *     the whole body (split at raw "&" and "=", then "+" and "%XX");
 *   - a value is at most 256 bytes kept; a composed key is the parts'
 *     netstrings, and a part outside 1..255 bytes, or with a control
 *     character, is refused by the composition.
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_keyscan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define FUZZ_MAX_PIECES  16


typedef struct {
    ngx_int_t    rc;
    ngx_str_t    value;
    ngx_str_t    why;
} fuzz_part_t;


static void fuzz_scan(ngx_pool_t *pool, ngx_http_idempotency_keysrc_t *ks,
    const u_char *body, size_t len, size_t *ends, ngx_uint_t n,
    fuzz_part_t *out);
static void fuzz_form_ref(const u_char *body, size_t len, ngx_str_t *name,
    size_t max_body, fuzz_part_t *ref, u_char *buf);
static size_t fuzz_decode(const u_char *p, size_t n, u_char *out);
static int fuzz_good_part(ngx_str_t *part);
static int fuzz_eq(ngx_str_t *a, ngx_str_t *b);


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ngx_fuzz_init();
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                         *copy, *nul, *p, *line, *body, *kb;
    size_t                          blen, ends[FUZZ_MAX_PIECES];
    ngx_int_t                       rc;
    ngx_str_t                       spec, parts[NGX_HTTP_IDEMPOTENCY_SOURCES];
    ngx_str_t                       key;
    ngx_uint_t                      i, n, np, bad, nparts;
    ngx_pool_t                     *pool;
    const char                     *err;
    fuzz_part_t                     whole[NGX_HTTP_IDEMPOTENCY_SOURCES];
    fuzz_part_t                     split[NGX_HTTP_IDEMPOTENCY_SOURCES];
    fuzz_part_t                     ref;
    ngx_http_idempotency_keysrc_t   ks;
    u_char                          refbuf[1 << 16];

    if (size < 3) {
        return 0;
    }

    pool = ngx_fuzz_pool();

    copy = ngx_pnalloc(pool, size);
    memcpy(copy, data, size);

    nul = memchr(copy + 3, '\0', size - 3);
    if (nul == NULL) {
        ngx_destroy_pool(pool);
        return 0;
    }

    memset(&ks, 0, sizeof(ks));
    ks.max_body = copy[1] ? (size_t) copy[1] * 8 : 1024 * 1024;
    ngx_str_set(&ks.max_body_text, "fuzz");

    /* the sources, one a line */

    for (line = copy + 3; line < nul; line = p + 1) {
        p = memchr(line, '\n', nul - line);
        p = p ? p : nul;

        spec.data = line;
        spec.len = p - line;

        err = NULL;
        rc = ngx_http_idempotency_source_parse(pool, &ks, &spec, &err);

        fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED || rc == NGX_ABORT);
        fuzz_assert(rc != NGX_ABORT || (err != NULL && err[0] != '\0'));
        fuzz_assert(ks.nsources <= NGX_HTTP_IDEMPOTENCY_SOURCES);
    }

    if (ks.npaths + ks.nfields == 0) {
        ngx_destroy_pool(pool);
        return 0;
    }

    body = nul + 1;
    blen = copy + size - body;

    /* the pieces' ends, from the body's own bytes */

    np = copy[2] % FUZZ_MAX_PIECES;

    for (i = 0; i < np; i++) {
        ends[i] = blen ? ((size_t) body[(i * 7) % blen] * 131 + i) % (blen + 1)
                       : 0;
    }

    for (i = 1; i < np; i++) {
        for (n = i; n > 0 && ends[n - 1] > ends[n]; n--) {
            size_t t = ends[n];
            ends[n] = ends[n - 1];
            ends[n - 1] = t;
        }
    }

    fuzz_scan(pool, &ks, body, blen, NULL, 0, whole);
    fuzz_scan(pool, &ks, body, blen, ends, np, split);

    nparts = 0;

    for (i = 0; i < ks.nsources; i++) {
        if (ks.sources[i].type == NGX_HTTP_IDEMPOTENCY_SRC_VALUE) {
            continue;
        }

        if (whole[i].rc != split[i].rc
            || !fuzz_eq(&whole[i].value, &split[i].value)
            || !fuzz_eq(&whole[i].why, &split[i].why))
        {
            fprintf(stderr, "source %u: rc %d / %d\n", (unsigned) i,
                    (int) whole[i].rc, (int) split[i].rc);
            fuzz_dump("whole value", whole[i].value.data, whole[i].value.len);
            fuzz_dump("split value", split[i].value.data, split[i].value.len);
            fuzz_dump("whole why", whole[i].why.data, whole[i].why.len);
            fuzz_dump("split why", split[i].why.data, split[i].why.len);
            fuzz_assert(0 && "a body in pieces scans as the body whole");
        }

        if (whole[i].rc == NGX_HTTP_IDEMPOTENCY_PART_OK) {
            fuzz_assert(whole[i].value.len <= NGX_HTTP_IDEMPOTENCY_KEY_MAX + 1);
            parts[nparts++] = whole[i].value;

        } else {
            fuzz_assert(whole[i].why.len > 0);
        }

        if (ks.sources[i].type == NGX_HTTP_IDEMPOTENCY_SRC_FORM) {
            fuzz_form_ref(body, blen, &ks.fields[ks.sources[i].n],
                          ks.max_body, &ref, refbuf);

            if (ref.rc != whole[i].rc
                || (ref.rc == NGX_HTTP_IDEMPOTENCY_PART_OK
                    && !fuzz_eq(&ref.value, &whole[i].value)))
            {
                fprintf(stderr, "form field: rc %d, reference %d\n",
                        (int) whole[i].rc, (int) ref.rc);
                fuzz_dump("field", ks.fields[ks.sources[i].n].data,
                          ks.fields[ks.sources[i].n].len);
                fuzz_dump("value", whole[i].value.data, whole[i].value.len);
                fuzz_dump("reference", ref.value.data, ref.value.len);
                fuzz_assert(0 && "a form field decodes as a plain decoder");
            }
        }
    }

    if (nparts == 0) {
        ngx_destroy_pool(pool);
        return 0;
    }

    /* the composition: netstrings of valid parts, or the bad part */

    err = NULL;
    rc = ngx_http_idempotency_key_compose(pool, parts, nparts, &key, &bad,
                                          &err);

    if (rc != NGX_OK) {
        fuzz_assert(rc == NGX_HTTP_IDEMPOTENCY_PART_MISSING
                    || rc == NGX_HTTP_IDEMPOTENCY_PART_INVALID);
        fuzz_assert(bad < nparts && err != NULL);

        fuzz_assert(!fuzz_good_part(&parts[bad]));

    } else {
        kb = key.data;

        for (i = 0; i < nparts; i++) {
            fuzz_assert(fuzz_good_part(&parts[i]));
            n = 0;
            while (*kb != ':') {
                fuzz_assert(*kb >= '0' && *kb <= '9');
                n = n * 10 + (*kb++ - '0');
            }

            kb++;
            fuzz_assert(n == parts[i].len
                        && memcmp(kb, parts[i].data, n) == 0
                        && kb[n] == ',');
            kb += n + 1;
        }

        fuzz_assert(kb == key.data + key.len);
    }

    ngx_destroy_pool(pool);

    return 0;
}


/* a scan of the body, whole (n 0) or in pieces ending at ends[] */

static void
fuzz_scan(ngx_pool_t *pool, ngx_http_idempotency_keysrc_t *ks,
    const u_char *body, size_t len, size_t *ends, ngx_uint_t n,
    fuzz_part_t *out)
{
    u_char                          *piece;
    size_t                           from, to;
    ngx_uint_t                       i;
    ngx_http_idempotency_keyscan_t  *scan;

    scan = ngx_http_idempotency_keyscan_create(pool, ks);
    fuzz_assert(scan != NULL);

    /* pieces told of beforehand, as keysrc.c tells of a body in memory,
     * or not: the same scan */
    if (n & 1) {
        ngx_http_idempotency_keyscan_expect(scan, len);
    }

    from = 0;

    for (i = 0; i <= n; i++) {
        to = (i < n) ? ends[i] : len;

        if (to > from) {
            /* each piece its own allocation: reads past it are caught */
            piece = malloc(to - from);
            memcpy(piece, body + from, to - from);

            fuzz_assert(ngx_http_idempotency_keyscan_feed(scan, piece,
                                                          to - from)
                        == NGX_OK);
            free(piece);
            from = to;
        }
    }

    fuzz_assert(ngx_http_idempotency_keyscan_end(scan) == NGX_OK);

    for (i = 0; i < ks->nsources; i++) {
        if (ks->sources[i].type == NGX_HTTP_IDEMPOTENCY_SRC_VALUE) {
            continue;
        }

        ngx_str_null(&out[i].value);
        ngx_str_null(&out[i].why);

        out[i].rc = ngx_http_idempotency_keyscan_part(scan, &ks->sources[i],
                                                      &out[i].value,
                                                      &out[i].why);
        fuzz_assert(out[i].rc != NGX_ERROR);
    }
}


/* the reference: the whole body split at raw "&" and "=", then decoded */

static void
fuzz_form_ref(const u_char *body, size_t len, ngx_str_t *name,
    size_t max_body, fuzz_part_t *ref, u_char *buf)
{
    u_char        *dn;
    size_t         nl, vl;
    ngx_uint_t     count;
    const u_char  *p, *last, *f, *eq;

    ngx_str_null(&ref->value);

    if (len == 0) {
        ref->rc = NGX_HTTP_IDEMPOTENCY_PART_MISSING;
        return;
    }

    if (len > max_body) {
        ref->rc = NGX_HTTP_IDEMPOTENCY_PART_BODY;
        return;
    }

    dn = malloc(len + 1);
    count = 0;

    for (p = body, last = body + len; p <= last; p = f + 1) {
        f = memchr(p, '&', last - p);
        f = f ? f : last;

        eq = memchr(p, '=', f - p);

        nl = fuzz_decode(p, (eq ? eq : f) - p, dn);

        if (nl == name->len && memcmp(dn, name->data, nl) == 0) {
            if (count++ == 0) {
                vl = eq ? fuzz_decode(eq + 1, f - eq - 1, buf) : 0;
                ref->value.data = buf;
                ref->value.len = ngx_min(vl, NGX_HTTP_IDEMPOTENCY_KEY_MAX + 1);
            }
        }

        if (f == last) {
            break;
        }
    }

    free(dn);

    ref->rc = (count == 0) ? NGX_HTTP_IDEMPOTENCY_PART_MISSING
              : (count > 1) ? NGX_HTTP_IDEMPOTENCY_PART_INVALID
              : NGX_HTTP_IDEMPOTENCY_PART_OK;
}


static int
fuzz_hex(u_char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }

    c |= 0x20;

    return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}


static size_t
fuzz_decode(const u_char *p, size_t n, u_char *out)
{
    size_t  i, o;

    for (i = 0, o = 0; i < n; i++) {
        if (p[i] == '+') {
            out[o++] = ' ';

        } else if (p[i] == '%' && i + 2 < n
                   && fuzz_hex(p[i + 1]) >= 0 && fuzz_hex(p[i + 2]) >= 0)
        {
            out[o++] = (u_char) (fuzz_hex(p[i + 1]) << 4 | fuzz_hex(p[i + 2]));
            i += 2;

        } else {
            out[o++] = p[i];
        }
    }

    return o;
}


/* 1 to 255 bytes, no control character */

static int
fuzz_good_part(ngx_str_t *part)
{
    size_t  i;

    if (part->len == 0 || part->len > NGX_HTTP_IDEMPOTENCY_KEY_MAX) {
        return 0;
    }

    for (i = 0; i < part->len; i++) {
        if (part->data[i] < 0x20 || part->data[i] == 0x7f) {
            return 0;
        }
    }

    return 1;
}


static int
fuzz_eq(ngx_str_t *a, ngx_str_t *b)
{
    return a->len == b->len
           && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}
