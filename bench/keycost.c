
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * make bench-keycost: what the key's JSON scan and a webhook's signature
 * cost a delivery, measured alone on the module's own code (keyscan.c
 * and json.c over yajl, hmac.c), with the fingerprint's SHA-256 of the
 * same body for scale.  The bodies are bench/lua/webhook.lua's: a
 * Stripe-like event of 2 KB, 64 KB or 1 MB whose key is data.object.id,
 * its padding one long string, and a 64 KB one padded with 2,000 short
 * members instead (a token each, as a real object's fields are).
 *
 *   build/keycost [SECONDS per figure, default 1]
 *
 * Each figure is the median of 5 runs of SECONDS / 5, in microseconds per
 * delivery, on one core: the scan as nginx does it (a scan made in the
 * request's pool, the body fed in one piece, in 8 KB buffers of memory
 * (as a chunked body's chunks are), or in the 512 KB reads of a temp
 * file, the key's part read back), the HMAC as a Stripe check does it (a copy of the
 * keyed context, "t." and the body, the tag compared), the SHA-256 as the
 * fingerprint does it.
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_keyscan.h"
#include "ngx_http_idempotency_hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


typedef void (*bench_pt)(u_char *body, size_t len);


static ngx_http_idempotency_keysrc_t  conf;
static void                          *hmac_key;
static EVP_MD_CTX                    *md_ctx;
static const EVP_MD                  *md;
static size_t                         piece = 0;
static volatile size_t                sink;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static u_char *
body_of(size_t size, ngx_uint_t members, size_t *len)
{
    u_char      *b, *p;
    size_t       pad, i;
    const char  *id = "u1a2b3c4d5e6f7a8b-1-123456";

    b = malloc(size + 512);

    p = b + sprintf((char *) b,
                    "{\"id\":\"evt_%s\",\"object\":\"event\","
                    "\"api_version\":\"2024-06-20\","
                    "\"type\":\"charge.succeeded\",\"data\":{\"object\":"
                    "{\"id\":\"ch_%s\",\"object\":\"charge\","
                    "\"amount\":1099,\"currency\":\"eur\","
                    "\"description\":\"", id, id);

    pad = size > (size_t) (p - b) + 4 ? size - (p - b) - 4 : 0;

    if (members) {
        /* the padding as short members, as a real event's object has */
        p = (u_char *) stpcpy((char *) p, "x\",\"metadata\":{");

        for (i = 0; (size_t) (p - b) + 40 < size; i++) {
            p += sprintf((char *) p, "%s\"k%zu\":\"value-%zu\"",
                         i ? "," : "", i, i);
        }

        p = (u_char *) stpcpy((char *) p, "}}}}");

    } else {
        memset(p, 'x', pad);
        p += pad;
        p = (u_char *) stpcpy((char *) p, "\"}}}");
    }

    *len = p - b;

    return b;
}


static void
scan(u_char *body, size_t len)
{
    size_t                           off, n;
    ngx_str_t                        value, why;
    ngx_pool_t                      *pool;
    ngx_http_idempotency_keyscan_t  *s;

    pool = ngx_create_pool(4096, &ngx_fuzz_log);
    s = ngx_http_idempotency_keyscan_create(pool, &conf);

    /* as keysrc.c tells it of a body in memory */
    if (piece && piece < 65536) {
        ngx_http_idempotency_keyscan_expect(s, len);
    }

    for (off = 0; off < len; off += n) {
        n = piece ? ngx_min(piece, len - off) : len;
        (void) ngx_http_idempotency_keyscan_feed(s, body + off, n);
    }

    (void) ngx_http_idempotency_keyscan_end(s);

    if (ngx_http_idempotency_keyscan_part(s, &conf.sources[0], &value, &why)
        != NGX_HTTP_IDEMPOTENCY_PART_OK)
    {
        fprintf(stderr, "keycost: no key: %.*s\n", (int) why.len, why.data);
        exit(1);
    }

    sink += value.len;

    ngx_destroy_pool(pool);
}


static void
hmac(u_char *body, size_t len)
{
    void    *h;
    u_char   tag[NGX_HTTP_IDEMPOTENCY_HMAC_LEN];

    static u_char  want[NGX_HTTP_IDEMPOTENCY_HMAC_LEN];

    h = ngx_http_idempotency_hmac_start(hmac_key);

    (void) ngx_http_idempotency_hmac_update(h, (u_char *) "1764000000.", 11);
    (void) ngx_http_idempotency_hmac_update(h, body, len);
    (void) ngx_http_idempotency_hmac_finish(h, tag);

    sink += CRYPTO_memcmp(tag, want, sizeof(tag)) != 0;
}


static void
sha256(u_char *body, size_t len)
{
    u_char  out[32];

    EVP_DigestInit_ex(md_ctx, md, NULL);
    EVP_DigestUpdate(md_ctx, "idempotency-fp/1POST\0/hooks/stripe\0", 35);
    EVP_DigestUpdate(md_ctx, body, len);
    EVP_DigestFinal_ex(md_ctx, out, NULL);

    sink += out[0];
}


static int
cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* µs per call: the median of 5 runs of secs / 5 */

static double
measure(bench_pt f, u_char *body, size_t len, double secs)
{
    int      r;
    double   t0, t, runs[5];
    size_t   n;

    for (r = 0; r < 5; r++) {
        n = 0;
        t0 = now();

        do {
            f(body, len);
            n++;
            t = now();
        } while (t - t0 < secs / 5);

        runs[r] = (t - t0) * 1e6 / n;
    }

    qsort(runs, 5, sizeof(double), cmp);

    return runs[2];
}


int
main(int argc, char **argv)
{
    u_char       *body;
    size_t        len, i, sizes[4] = { 2048, 65536, 65536, 1048576 };
    double        secs, js, jp, jf, hm, fp;
    ngx_str_t     spec, secret;
    ngx_pool_t   *pool;
    const char   *err;

    secs = argc > 1 ? atof(argv[1]) : 1.0;

    ngx_fuzz_init();
    pool = ngx_create_pool(4096, &ngx_fuzz_log);

    conf.max_body = 1024 * 1024;
    ngx_str_set(&conf.max_body_text, "1m");
    ngx_str_set(&spec, "json=data.object.id");

    if (ngx_http_idempotency_source_parse(pool, &conf, &spec, &err)
        != NGX_OK)
    {
        fprintf(stderr, "keycost: %s\n", err);
        return 1;
    }

    ngx_str_set(&secret, "whsec_bench_0123456789abcdef0123456789");
    hmac_key = ngx_http_idempotency_hmac_key(pool, &secret);
    md = EVP_sha256();
    md_ctx = EVP_MD_CTX_new();

    if (hmac_key == NULL || md_ctx == NULL) {
        fprintf(stderr, "keycost: no HMAC-SHA256\n");
        return 1;
    }

    printf("| body | JSON scan, one piece | JSON scan, 8 KB pieces | "
           "JSON scan, 512 KB pieces | HMAC-SHA256 (Stripe) | "
           "SHA-256 (fingerprint) |\n");
    printf("|---|--:|--:|--:|--:|--:|\n");

    for (i = 0; i < 4; i++) {
        body = body_of(sizes[i], i == 2, &len);

        piece = 0;
        js = measure(scan, body, len, secs);
        piece = 8192;
        jp = measure(scan, body, len, secs);
        piece = 512 * 1024;
        jf = measure(scan, body, len, secs);
        hm = measure(hmac, body, len, secs);
        fp = measure(sha256, body, len, secs);

        printf("| %zu bytes%s | %.2f µs | %.2f µs | %.2f µs | %.2f µs | "
               "%.2f µs |\n", len, i == 2 ? ", short members" : "",
               js, jp, jf, hm, fp);

        free(body);
    }

    return sink == (size_t) -1;
}
