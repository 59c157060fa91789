
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * TEST-ONLY stubs and helpers for the libFuzzer targets (see ngx_fuzz.h).
 * Nothing here is part of the module or of nginx.
 */


#include "ngx_fuzz.h"

#include <stdio.h>
#include <stdlib.h>


ngx_log_t  ngx_fuzz_log;

/* ngx_sort() (ngx_string.c) refers to it; nothing here uses a cycle */
volatile ngx_cycle_t  *ngx_cycle;


void
ngx_fuzz_init(void)
{
    ngx_uint_t  n;

    ngx_pagesize = getpagesize();
    ngx_cacheline_size = NGX_CPU_CACHE_LINE;

    for (n = ngx_pagesize; n >>= 1; ngx_pagesize_shift++) { /* void */ }

    ngx_fuzz_log.log_level = getenv("FUZZ_NGX_LOG") ? NGX_LOG_DEBUG_ALL
                                                    : NGX_LOG_EMERG;
}


ngx_pool_t *
ngx_fuzz_pool(void)
{
    ngx_pool_t  *pool;

    pool = ngx_create_pool(4096, &ngx_fuzz_log);
    if (pool == NULL) {
        abort();
    }

    /*
     * every ngx_palloc()/ngx_pnalloc() now takes the "large" path, one
     * ngx_alloc() of exactly the size asked for: an access one byte past
     * an allocation is a heap-buffer-overflow report, not a silent read
     * of the pool's next bytes
     */

    pool->max = 0;

    return pool;
}


ngx_http_request_t *
ngx_fuzz_request(ngx_pool_t *pool)
{
    ngx_http_request_t  *r;

    r = ngx_pcalloc(pool, sizeof(ngx_http_request_t));
    if (r == NULL) {
        abort();
    }

    r->pool = pool;

    return r;
}


void
fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "\n==FUZZ== invariant violated at %s:%d: %s\n",
            file, line, what);
    abort();
}


void
fuzz_dump(const char *label, const u_char *p, size_t len)
{
    size_t  i;

    fprintf(stderr, "%s (%zu bytes): \"", label, len);

    for (i = 0; i < len && i < 1024; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') {
            fputc(p[i], stderr);

        } else {
            fprintf(stderr, "\\x%02x", p[i]);
        }
    }

    fprintf(stderr, "\"%s\n", len > 1024 ? "..." : "");
}


/* ---- stubs for nginx core functions not compiled in ---- */


void
ngx_log_error_core(ngx_uint_t level, ngx_log_t *log, ngx_err_t err,
    const char *fmt, ...)
{
    va_list  args;
    u_char   buf[NGX_MAX_ERROR_STR], *p;

    if (!getenv("FUZZ_NGX_LOG")) {
        return;
    }

    va_start(args, fmt);
    p = ngx_vslprintf(buf, buf + sizeof(buf) - 1, fmt, args);
    va_end(args);

    fprintf(stderr, "ngx[%lu] %.*s (err %d)\n", (unsigned long) level,
            (int) (p - buf), buf, (int) err);
}


/* src/os/unix/ngx_files.c's pread() path, without the logging */

ssize_t
ngx_read_file(ngx_file_t *file, u_char *buf, size_t size, off_t offset)
{
    ssize_t  n;

    n = pread(file->fd, buf, size, offset);

    if (n == -1) {
        return NGX_ERROR;
    }

    file->offset += n;

    return n;
}
