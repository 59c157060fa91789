
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * libFuzzer target: ngx_http_idempotency_parse_key() on a raw header
 * value (the input).  TEST-ONLY.
 *
 * Invariants checked:
 *   - the result is NGX_OK or NGX_DECLINED (with a reason), never
 *     NGX_ERROR (the pool does not fail here);
 *   - the input is not modified;
 *   - on NGX_OK the key is 1..255 bytes of printable ASCII (0x20..0x7e);
 *   - the sf-String spelling of the key ("..." with \" and \\ escapes)
 *     parses to the same key;
 *   - when the key is a valid bare token (visible ASCII, no '"' or '\'),
 *     the bare spelling parses to the same key too;
 *   - a bare input that parses is its own key.
 */


#include "ngx_fuzz.h"
#include "ngx_http_idempotency_key.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void fuzz_reparse(const u_char *spelling, size_t len, ngx_str_t *key,
    const char *what);


int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ngx_fuzz_init();
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    u_char      *copy, *q, *p;
    size_t       i, n;
    ngx_int_t    rc;
    ngx_str_t    raw, key;
    ngx_pool_t  *pool;
    const char  *reason;

    pool = ngx_fuzz_pool();

    /* an exactly sized copy (size 0 still gets its own allocation) */
    copy = malloc(size ? size : 1);
    memcpy(copy, data, size);

    raw.data = copy;
    raw.len = size;

    reason = NULL;
    ngx_str_null(&key);

    rc = ngx_http_idempotency_parse_key(pool, &raw, &key, &reason);

    fuzz_assert(rc == NGX_OK || rc == NGX_DECLINED);
    fuzz_assert(memcmp(copy, data, size) == 0);
    fuzz_assert(raw.data == copy && raw.len == size);

    if (rc == NGX_DECLINED) {
        fuzz_assert(reason != NULL && reason[0] != '\0');
        goto done;
    }

    if (key.len < 1 || key.len > NGX_HTTP_IDEMPOTENCY_KEY_MAX) {
        fuzz_dump("input", data, size);
        fuzz_dump("key", key.data, key.len);
        fuzz_assert(key.len >= 1 && key.len <= NGX_HTTP_IDEMPOTENCY_KEY_MAX);
    }

    for (i = 0; i < key.len; i++) {
        if (key.data[i] < 0x20 || key.data[i] > 0x7e) {
            fuzz_dump("input", data, size);
            fuzz_dump("key", key.data, key.len);
            fuzz_assert(key.data[i] >= 0x20 && key.data[i] <= 0x7e);
        }
    }

    if (size && data[0] != '"') {
        /* a bare token is the key itself */
        fuzz_assert(key.len == size && memcmp(key.data, data, size) == 0);
    }

    /* the sf-String spelling: "..." with \" and \\ */

    q = malloc(2 * key.len + 2);
    p = q;
    *p++ = '"';

    for (i = 0; i < key.len; i++) {
        if (key.data[i] == '"' || key.data[i] == '\\') {
            *p++ = '\\';
        }
        *p++ = key.data[i];
    }

    *p++ = '"';

    fuzz_reparse(q, p - q, &key, "sf-String spelling");
    free(q);

    /* the bare spelling, when the characters allow one */

    for (n = 0; n < key.len; n++) {
        if (key.data[n] <= 0x20 || key.data[n] >= 0x7f
            || key.data[n] == '"' || key.data[n] == '\\')
        {
            break;
        }
    }

    if (n == key.len) {
        fuzz_reparse(key.data, key.len, &key, "bare spelling");
    }

done:

    free(copy);
    ngx_destroy_pool(pool);

    return 0;
}


static void
fuzz_reparse(const u_char *spelling, size_t len, ngx_str_t *key,
    const char *what)
{
    u_char      *copy;
    ngx_int_t    rc;
    ngx_str_t    raw, again;
    ngx_pool_t  *pool;
    const char  *reason;

    pool = ngx_fuzz_pool();

    copy = malloc(len ? len : 1);
    memcpy(copy, spelling, len);

    raw.data = copy;
    raw.len = len;
    reason = NULL;
    ngx_str_null(&again);

    rc = ngx_http_idempotency_parse_key(pool, &raw, &again, &reason);

    if (rc != NGX_OK || again.len != key->len
        || memcmp(again.data, key->data, key->len) != 0)
    {
        fprintf(stderr, "%s of the key does not parse to the same key "
                "(rc %d, %s)\n", what, (int) rc, reason ? reason : "-");
        fuzz_dump("key", key->data, key->len);
        fuzz_dump("spelling", spelling, len);
        fuzz_dump("parsed", again.data, rc == NGX_OK ? again.len : 0);
        fuzz_assert(0 && "re-spelled key parses to the same key");
    }

    free(copy);
    ngx_destroy_pool(pool);
}
