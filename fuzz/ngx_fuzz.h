
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */

/*
 * TEST-ONLY support for the libFuzzer targets in fuzz/: a quiet log, a
 * pool that hands out every allocation as its own malloc() (so that
 * AddressSanitizer sees the exact bounds), and stubs for the few nginx
 * core functions the module's key.c and record.c call that are not
 * compiled in from nginx's own sources.
 */


#ifndef _NGX_FUZZ_H_INCLUDED_
#define _NGX_FUZZ_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define fuzz_assert(cond)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fuzz_fail(__FILE__, __LINE__, #cond);                             \
        }                                                                     \
    } while (0)


extern ngx_log_t  ngx_fuzz_log;


/* once per process: what ngx_os_init() would set */
void ngx_fuzz_init(void);

/* a pool whose every ngx_palloc() is a separate, exactly sized malloc() */
ngx_pool_t *ngx_fuzz_pool(void);

/* a zeroed fake request with its own pool (r->pool) */
ngx_http_request_t *ngx_fuzz_request(ngx_pool_t *pool);

void fuzz_fail(const char *file, int line, const char *what);

/* prints a labelled byte string (escaped) to stderr, for failure reports */
void fuzz_dump(const char *label, const u_char *p, size_t len);


#endif /* _NGX_FUZZ_H_INCLUDED_ */
