
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * libFuzzer target: the replay tier entry decoder
 * ngx_http_idempotency_entry_parse() on arbitrary bytes: what a Redis
 * that somebody else can write to may hand back.  TEST-ONLY.
 *
 * Checks, on NGX_OK:
 *   - the fingerprint and the record lie inside the input, the record
 *     right after the fixed part and up to its end;
 *   - the expiry is positive, the flags are only ENTRY_FP;
 *   - writing the fixed part again with ngx_http_idempotency_entry_head()
 *     from what was parsed gives back the input's first 52 bytes: the
 *     decoder accepts nothing but the canonical encoding;
 *   - the record parsed is the one record_parse() gives for those bytes.
 * On NGX_DECLINED (another format version) the input is at least 4 bytes
 * and starts with the magic.  AddressSanitizer catches any read outside
 * the (exactly sized) input.
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_entry.h"

#include <stdlib.h>
#include <string.h>


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ngx_fuzz_init();
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char                          *in;
    size_t                           rlen;
    ngx_int_t                        rc;
    ngx_pool_t                      *pool;
    const char                      *why;
    ngx_http_idempotency_entry_t     e;
    ngx_http_idempotency_record_t    rec;
    u_char                    head[NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN];

    in = malloc(size ? size : 1);
    memcpy(in, data, size);

    pool = ngx_fuzz_pool();
    ngx_memzero(&e, sizeof(e));
    why = NULL;

    rc = ngx_http_idempotency_entry_parse(pool, in, size, &e, &why);

    fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED || rc == NGX_ERROR);
    fuzz_assert(memcmp(in, data, size) == 0);

    if (rc != NGX_OK) {
        fuzz_assert(why != NULL);

        if (rc == NGX_DECLINED) {
            fuzz_assert(size >= 4 && memcmp(in, "IDE", 3) == 0);
        }

        goto done;
    }

    fuzz_assert(size >= NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN);
    fuzz_assert(e.flags == 0 || e.flags == NGX_HTTP_IDEMPOTENCY_ENTRY_FP
                || e.flags == NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN);
    fuzz_assert(e.expires > 0);
    fuzz_assert(e.epoch > 0);
    fuzz_assert(e.fingerprint == in + 20);
    rlen = size - NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN;

    /* the canonical fixed part: without ENTRY_FP the fingerprint must be
     * zeros, which entry_head() writes */

    fuzz_assert(ngx_http_idempotency_entry_head(head, e.flags, e.fingerprint,
                                                e.epoch, e.expires, rlen)
                == head + sizeof(head));
    fuzz_assert(memcmp(head, in, sizeof(head)) == 0);

    if (e.flags & NGX_HTTP_IDEMPOTENCY_ENTRY_FORGOTTEN) {
        /* a mark: no record */
        fuzz_assert(rlen == 0);
        goto done;
    }

    ngx_memzero(&rec, sizeof(rec));
    fuzz_assert(ngx_http_idempotency_record_parse(pool,
                                    in + NGX_HTTP_IDEMPOTENCY_ENTRY_HEAD_LEN,
                                    rlen, &rec)
                == NGX_OK);
    fuzz_assert(rec.status == e.record.status);
    fuzz_assert(rec.body.data == e.record.body.data
                && rec.body.len == e.record.body.len);
    fuzz_assert(rec.headers.nelts == e.record.headers.nelts);

done:

    ngx_destroy_pool(pool);
    free(in);

    return 0;
}
