
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: shared definitions.
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_MODULE_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define NGX_HTTP_IDEMPOTENCY_HASH_LEN     32     /* SHA-256 */
#define NGX_HTTP_IDEMPOTENCY_TOKEN_LEN    16
#define NGX_HTTP_IDEMPOTENCY_KEY_MAX      255

/* completion writes are retried this long, at least twice the lease
 * (complete.c): how long an owner's answer may still come */
#define NGX_HTTP_IDEMPOTENCY_COMPLETE_TIME   60000

/*
 * The build fails unless table has an entry for each of the n values of
 * the closed list that indexes it: an array of negative size (nginx
 * builds as C89, which has no _Static_assert).
 */
#define NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(table, n)                           \
    typedef char  ngx_http_idempotency_check_##table[                        \
        (sizeof(table) / sizeof((table)[0]) == (n)) ? 1 : -1]

/* what the request became; $idempotency_status */
typedef enum {
    NGX_HTTP_IDEMPOTENCY_BYPASS = 0,
    NGX_HTTP_IDEMPOTENCY_NEW,
    NGX_HTTP_IDEMPOTENCY_REPLAY,
    NGX_HTTP_IDEMPOTENCY_CONFLICT,
    NGX_HTTP_IDEMPOTENCY_MISMATCH,
    NGX_HTTP_IDEMPOTENCY_INVALID,
    NGX_HTTP_IDEMPOTENCY_MISSING,
    NGX_HTTP_IDEMPOTENCY_TAKEOVER,
    NGX_HTTP_IDEMPOTENCY_ERROR,
    NGX_HTTP_IDEMPOTENCY_UNSTORED,
    NGX_HTTP_IDEMPOTENCY_NOSCOPE,
    NGX_HTTP_IDEMPOTENCY_UNKNOWN,
    NGX_HTTP_IDEMPOTENCY_FIND,          /* forwarded: the backend's answer
                                           of an epoch that ran (fence.c) */
    NGX_HTTP_IDEMPOTENCY_REDRIVE,       /* forwarded again after an unknown
                                           outcome, for the backend to say */
    NGX_HTTP_IDEMPOTENCY_EXHAUSTED,
    NGX_HTTP_IDEMPOTENCY_UNVERIFIED,

    NGX_HTTP_IDEMPOTENCY_NSTATUSES      /* how many: no status */
} ngx_http_idempotency_status_e;

/* ctx->tier: where the verdict came from; $idempotency_tier */
typedef enum {
    NGX_HTTP_IDEMPOTENCY_TIER_NONE = 0,
    NGX_HTTP_IDEMPOTENCY_TIER_SHM,
    NGX_HTTP_IDEMPOTENCY_TIER_REDIS,
    NGX_HTTP_IDEMPOTENCY_TIER_MYSQL,

    NGX_HTTP_IDEMPOTENCY_NTIERS         /* how many: no tier */
} ngx_http_idempotency_tier_e;

/* row states in the store */
#define NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS   0
#define NGX_HTTP_IDEMPOTENCY_ROW_DONE       1
#define NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED   2
#define NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN    3    /* outcome unknown */
#define NGX_HTTP_IDEMPOTENCY_ROW_RELEASED   4    /* free, epoch kept; sql.c */
#define NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED   5    /* the backend's marker says
                                                    it ran; fence.c */

/*
 * idempotency_store_status: a bit per HTTP status below 600, set for
 * those whose answer is stored (conf->keep, never NULL once merged); a
 * larger status goes with 599
 */
#define NGX_HTTP_IDEMPOTENCY_STATUS_BITS    600

#define ngx_http_idempotency_kept(conf, s)                                   \
    ngx_http_idempotency_kept_bit((conf)->keep,                              \
        ((s) < NGX_HTTP_IDEMPOTENCY_STATUS_BITS) ? (s) : 599)
#define ngx_http_idempotency_kept_bit(keep, s)                               \
    ((keep)[(s) >> 3] & (1 << ((s) & 7)))

#define NGX_HTTP_IDEMPOTENCY_STORE_REJECT   0
#define NGX_HTTP_IDEMPOTENCY_STORE_PASS     1

/* idempotency_on_unknown_outcome */
#define NGX_HTTP_IDEMPOTENCY_UNKNOWN_KEEP     0
#define NGX_HTTP_IDEMPOTENCY_UNKNOWN_RELEASE  1
#define NGX_HTTP_IDEMPOTENCY_UNKNOWN_REDRIVE  2

/* ssl= of a store */
#define NGX_HTTP_IDEMPOTENCY_SSL_OFF        0
#define NGX_HTTP_IDEMPOTENCY_SSL_ON         1    /* TLS, any certificate */
#define NGX_HTTP_IDEMPOTENCY_SSL_VERIFY     2    /* TLS, ssl_ca= and name */


typedef struct ngx_http_idempotency_store_s  ngx_http_idempotency_store_t;

/*
 * The request context (ctx.h), declared here so that a step's header
 * names it without including ctx.h, which includes the steps' headers
 * for the parts it embeds.
 */
typedef struct ngx_http_idempotency_ctx_s    ngx_http_idempotency_ctx_t;

/*
 * Where a tier lookup or a hold goes on when it ends: rc NGX_OK, a tier
 * has the response (ctx->entry); NGX_DECLINED, MySQL is to be asked.
 */
typedef void (*ngx_http_idempotency_next_pt)(ngx_http_idempotency_ctx_t *ctx,
    ngx_int_t rc);

/* a report to the request: a write ended, a step's work ended */
typedef void (*ngx_http_idempotency_ctx_pt)(ngx_http_idempotency_ctx_t *ctx);

/*
 * "idempotency_key" (keyscan.h); "idempotency_signature", the signer a
 * location trusts (signature.c)
 */
typedef struct ngx_http_idempotency_keysrc_s  ngx_http_idempotency_keysrc_t;
typedef struct ngx_http_idempotency_signer_s  ngx_http_idempotency_signer_t;


/* one MySQL server of a store; "conns" is per worker, made on first use */
typedef struct {
    ngx_str_t                       name;      /* "127.0.0.1:3306" */
    ngx_str_t                       host;      /* IP literal, NUL-ended */
    in_port_t                       port;
    ngx_str_t                       socket;    /* unix path, NUL-ended */
    ngx_uint_t                      index;
    ngx_http_idempotency_store_t   *store;
    void                           *conns;
    size_t                          max_packet; /* per worker, 0: unknown */
    ngx_int_t                       existing;  /* per worker, claim.c */
    ngx_uint_t                      fences;    /* per worker, in flight */
} ngx_http_idempotency_shard_t;


struct ngx_http_idempotency_store_s {
    ngx_str_t                       name;
    ngx_array_t                     shards;    /* of ..._shard_t */
    ngx_str_t                       user;      /* NUL-ended */
    ngx_str_t                       password;  /* NUL-ended, never logged */
    ngx_str_t                       database;  /* NUL-ended */
    ngx_str_t                       table;     /* checked: [A-Za-z0-9_] */
    ngx_uint_t                      conns_max;
    ngx_uint_t                      wait_queue;
    ngx_msec_t                      connect_timeout;
    ngx_msec_t                      query_timeout;
    ngx_msec_t                      purge;     /* interval, 0: off */
    ngx_uint_t                      purge_batch;
    ngx_msec_t                      min_lease; /* of its locations */
    ngx_str_t                      *stmts;     /* per worker, sql.c */
    ngx_uint_t                      ssl;       /* NGX_HTTP_..._SSL_* */
    ngx_str_t                       ssl_ca;    /* full paths, NUL-ended, */
    ngx_str_t                       ssl_cert;  /* len 0: none */
    ngx_str_t                       ssl_key;

    /* replay tiers (tier.h): only completed responses, never claims */
    ngx_shm_zone_t                 *cache;     /* cache=, or NULL */
    ngx_str_t                       redis_name;    /* len 0: no Redis */
    ngx_str_t                       redis_host;    /* IP literal, NUL-ended */
    in_port_t                       redis_port;
    ngx_str_t                       redis_socket;  /* unix path, NUL-ended */
    ngx_str_t                       redis_password; /* never logged */
    ngx_int_t                       redis_db;      /* 0: no SELECT */
    ngx_msec_t                      redis_timeout;
    size_t                          redis_max_entry;
    ngx_array_t                    *secrets;   /* keyed HMACs, first signs */
    void                           *redis;     /* per worker, on first use */
    time_t                          redis_bad_logged;  /* per worker */
    ngx_uint_t                      redis_bad_quiet;   /* since then */

    /* metrics.h: the block in the zone, and this worker's gauges */
    struct ngx_http_idempotency_metrics_s  *metrics;
    ngx_uint_t                      in_progress;  /* leases renewed */
    ngx_uint_t                      held;         /* duplicates held */

    u_char                         *conf_file;  /* first reference */
    ngx_uint_t                      conf_line;
    unsigned                        defined:1;
    unsigned                        needs_secret:1;  /* issued keys */
    unsigned                        keys:1;    /* "idempotency" uses it */
    unsigned                        fence:1;   /* "idempotency_fence" */
    unsigned                        life:1;    /* its keys are fenced:
                                                  the column "life" */
};


typedef struct {
    ngx_array_t                     stores;    /* of ..._store_t * */
    ngx_array_t                     locations; /* their loc_conf, void ** */
    ngx_array_t                     resends;   /* resend.c: peer.init */
    size_t                          capture_memory;  /* per worker */
    ngx_uint_t                      max_held;        /* per worker */
} ngx_http_idempotency_main_conf_t;


typedef struct {
    ngx_http_idempotency_store_t   *store;     /* NULL: off */
    ngx_http_idempotency_store_t   *admin;     /* idempotency_admin */
    ngx_uint_t                      methods;
    ngx_str_t                       header;
    ngx_http_idempotency_keysrc_t  *keysrc;    /* NULL: the header */
    ngx_http_idempotency_signer_t  *signer;    /* NULL: none */
    ngx_flag_t                      required;
    ngx_http_complex_value_t       *scope;
    ngx_flag_t                      fingerprint;
    time_t                          ttl;
    ngx_msec_t                      lease;
    ngx_msec_t                      wait;
    ngx_flag_t                      store_5xx;
    u_char                         *keep;      /* store_status, bits */
    size_t                          max_response_size;
    ngx_array_t                    *skip_headers; /* of ngx_str_t */
    ngx_uint_t                      on_store_error;
    ngx_uint_t                      on_unknown;
    ngx_str_t                       epoch_header;  /* len 0: none */
    ngx_str_t                       attempt_header; /* len 0: none */
    ngx_uint_t                      max_attempts;  /* epochs, claim.c */
    ngx_http_idempotency_store_t   *fence;     /* NULL: off; fence.c */
    ngx_str_t                       fence_table;
    ngx_flag_t                      fence_find;
    ngx_uint_t                      keys;      /* issue.h: any, issued */
    time_t                          issuer_ttl; /* UNSET: no issuer */
} ngx_http_idempotency_loc_conf_t;


extern ngx_module_t  ngx_http_idempotency_module;

/* the values of $idempotency_status, by NGX_HTTP_IDEMPOTENCY_BYPASS ... */
extern ngx_str_t     ngx_http_idempotency_status_names[];

/* the values of $idempotency_tier, by NGX_HTTP_IDEMPOTENCY_TIER_SHM ... */
extern ngx_str_t     ngx_http_idempotency_tier_names[];


#endif /* _NGX_HTTP_IDEMPOTENCY_MODULE_H_INCLUDED_ */
