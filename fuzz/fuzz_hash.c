
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * libFuzzer target: the lookup hash ngx_http_idempotency_key_hash() and
 * the request fingerprint ngx_http_idempotency_fingerprint().  TEST-ONLY.
 *
 * Input: an 8-byte header, 2 bytes per body split point, then the
 * payload P.
 *
 *   h[0]      flags: 1 some body pieces in a temp file, 2 empty buffers
 *             between pieces, 4 data-less buffers (flush, last_buf),
 *             8 no request_body at all when the body is empty
 *   h[1]      method length (mod)        h[2..3]  URI length (mod)
 *   h[4..5]   scope/key split of P       h[6]     split points k (mod 16)
 *   h[7]      which pieces go to the file (bit i: piece i, with flag 1)
 *
 * Checks:
 *   - key_hash(scope, key) is SHA-256("idempotency-key/1" . u32be(|scope|)
 *     . scope . key), the framing t/IdemTest.pm documents;
 *   - another split of the same bytes into scope and key gives another
 *     hash (the framing is unambiguous);
 *   - fingerprint(r) is SHA-256("idempotency-fp/1" . method . "\0" . URI
 *     . "\0" . body) whatever the body's split into buffers, memory or
 *     file, with empty and data-less buffers in between, and however
 *     small the slices in which a temp file is hashed.
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_key.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define FUZZ_MAX_PIECES  17


static int  fuzz_fd = -1;


static void
fuzz_ref_key(const u_char *scope, size_t slen, const u_char *key,
    size_t klen, u_char *out)
{
    u_char      len[4];
    SHA256_CTX  c;

    len[0] = (u_char) (slen >> 24);
    len[1] = (u_char) (slen >> 16);
    len[2] = (u_char) (slen >> 8);
    len[3] = (u_char) slen;

    SHA256_Init(&c);
    SHA256_Update(&c, "idempotency-key/1", 17);
    SHA256_Update(&c, len, 4);
    SHA256_Update(&c, scope, slen);
    SHA256_Update(&c, key, klen);
    SHA256_Final(out, &c);
}


static void
fuzz_ref_fp(ngx_str_t *method, ngx_str_t *uri, const u_char *body,
    size_t blen, u_char *out)
{
    SHA256_CTX  c;

    SHA256_Init(&c);
    SHA256_Update(&c, "idempotency-fp/1", 16);
    SHA256_Update(&c, method->data, method->len);
    SHA256_Update(&c, "", 1);
    SHA256_Update(&c, uri->data, uri->len);
    SHA256_Update(&c, "", 1);
    SHA256_Update(&c, body, blen);
    SHA256_Final(out, &c);
}


static int
fuzz_cmp_off(const void *a, const void *b)
{
    size_t  x = *(const size_t *) a, y = *(const size_t *) b;

    return (x > y) - (x < y);
}


static ngx_chain_t *
fuzz_link(ngx_pool_t *pool, ngx_chain_t **last, ngx_buf_t *b)
{
    ngx_chain_t  *cl;

    cl = ngx_alloc_chain_link(pool);
    if (cl == NULL) {
        abort();
    }

    cl->buf = b;
    cl->next = NULL;
    *last = cl;

    return cl;
}


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    FILE  *f;

    ngx_fuzz_init();

    f = tmpfile();
    if (f == NULL) {
        abort();
    }

    fuzz_fd = dup(fileno(f));
    fclose(f);

    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                   *payload, *body, *mem;
    u_char                    h1[32], h2[32], ref[32];
    size_t                    plen, mlen, ulen, blen, split, split2, k, i;
    size_t                    off[FUZZ_MAX_PIECES + 1];
    ngx_int_t                 rc;
    ngx_uint_t                flags, filemask;
    ngx_buf_t                *b;
    ngx_str_t                 scope, key, method, uri;
    ngx_file_t               *file;
    ngx_pool_t               *pool;
    ngx_chain_t             **last;
    ngx_http_request_t       *r;
    ngx_http_idempotency_fp_t  fp;

    if (size < 8) {
        return 0;
    }

    flags = data[0];
    k = data[6] % (FUZZ_MAX_PIECES - 1);
    filemask = data[7];

    if (size < 8 + 2 * k) {
        return 0;
    }

    plen = size - 8 - 2 * k;
    payload = malloc(plen ? plen : 1);
    memcpy(payload, data + 8 + 2 * k, plen);

    pool = ngx_fuzz_pool();

    /* ---- the key hash ---- */

    split = ((size_t) data[4] << 8 | data[5]) % (plen + 1);

    scope.data = payload;
    scope.len = split;
    key.data = payload + split;
    key.len = plen - split;

    fuzz_assert(ngx_http_idempotency_key_hash(&scope, &key, h1) == NGX_OK);

    fuzz_ref_key(scope.data, scope.len, key.data, key.len, ref);
    fuzz_assert(memcmp(h1, ref, 32) == 0);

    /* another split of the same bytes: another hash */

    split2 = (split * 7 + 1 + data[1]) % (plen + 1);

    if (split2 != split) {
        scope.len = split2;
        key.data = payload + split2;
        key.len = plen - split2;

        fuzz_assert(ngx_http_idempotency_key_hash(&scope, &key, h2)
                    == NGX_OK);
        fuzz_assert(memcmp(h1, h2, 32) != 0);
    }

    /* ---- the fingerprint ---- */

    mlen = data[1] % (plen + 1);
    ulen = ((size_t) data[2] << 8 | data[3]) % (plen - mlen + 1);
    blen = plen - mlen - ulen;

    method.data = payload;
    method.len = mlen;
    uri.data = payload + mlen;
    uri.len = ulen;
    body = payload + mlen + ulen;

    r = ngx_fuzz_request(pool);
    r->method_name = method;
    r->unparsed_uri = uri;

    /* the pieces: k split points in the body, sorted */

    off[0] = 0;
    for (i = 0; i < k; i++) {
        off[i + 1] = (((size_t) data[8 + 2 * i] << 8) | data[9 + 2 * i])
                     % (blen + 1);
    }
    qsort(off + 1, k, sizeof(size_t), fuzz_cmp_off);
    off[k + 1] = blen;

    if (blen || !(flags & 8)) {
        r->request_body = ngx_pcalloc(pool, sizeof(ngx_http_request_body_t));
        if (r->request_body == NULL) {
            abort();
        }

        file = NULL;

        if ((flags & 1) && filemask) {
            /* the whole body in the file; pieces point into it */
            if (ftruncate(fuzz_fd, 0) != 0
                || pwrite(fuzz_fd, body, blen, 0) != (ssize_t) blen)
            {
                abort();
            }

            file = ngx_pcalloc(pool, sizeof(ngx_file_t));
            file->fd = fuzz_fd;
            ngx_str_set(&file->name, "fuzz-body");
            file->log = &ngx_fuzz_log;
        }

        last = &r->request_body->bufs;

        for (i = 0; i <= k; i++) {

            if ((flags & 2) && (i & 1)) {
                /* an empty memory buffer */
                b = ngx_calloc_buf(pool);
                b->temporary = 1;
                b->pos = b->last = body;
                last = &fuzz_link(pool, last, b)->next;
            }

            if ((flags & 4) && i == 0) {
                b = ngx_calloc_buf(pool);
                b->flush = 1;
                last = &fuzz_link(pool, last, b)->next;
            }

            b = ngx_calloc_buf(pool);

            if (file && (filemask & (1u << (i % 8)))) {
                b->in_file = 1;
                b->file = file;
                b->file_pos = off[i];
                b->file_last = off[i + 1];

            } else {
                /* an exactly sized copy, so that reads past it are seen */
                mem = ngx_pnalloc(pool, off[i + 1] - off[i]);
                ngx_memcpy(mem, body + off[i], off[i + 1] - off[i]);
                b->temporary = 1;
                b->start = b->pos = mem;
                b->end = b->last = mem + (off[i + 1] - off[i]);
            }

            last = &fuzz_link(pool, last, b)->next;
        }

        if (flags & 4) {
            b = ngx_calloc_buf(pool);
            b->last_buf = 1;
            last = &fuzz_link(pool, last, b)->next;
        }
    }

    /* slices of 1 to 16 bytes: the hash goes on across many calls */

    ngx_http_idempotency_hash_slice = 1 + (data[1] & 15);
    ngx_memzero(&fp, sizeof(fp));

    do {
        rc = ngx_http_idempotency_fingerprint(r, &fp, h1);
    } while (rc == NGX_AGAIN);

    fuzz_assert(rc == NGX_OK);

    fuzz_ref_fp(&method, &uri, body, blen, ref);

    if (memcmp(h1, ref, 32) != 0) {
        fprintf(stderr, "fingerprint depends on the body's split "
                "(%zu pieces, flags %u)\n", k + 1, (unsigned) flags);
        fuzz_dump("method", method.data, method.len);
        fuzz_dump("uri", uri.data, uri.len);
        fuzz_dump("body", body, blen);
        fuzz_assert(0 && "fingerprint == SHA-256 of the unsplit request");
    }

    ngx_destroy_pool(pool);
    free(payload);

    return 0;
}
