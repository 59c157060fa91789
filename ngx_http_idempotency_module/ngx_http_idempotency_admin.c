
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: "idempotency_admin STORE;", the operator
 * API.
 *
 * A content handler, like stub_status and idempotency_metrics, that
 * answers JSON from the query arguments alone: a key's row (by hash, or
 * by key and scope, hashed as the request path hashes them), the keys in
 * progress or of unknown outcome (every shard asked, the answers merged,
 * oldest first), and the two changes an operator may make.  A change is
 * one UPDATE (sql.c) conditional on the row's version, the text the
 * operator read with GET: a row that was renewed, completed or taken over
 * since stays.  It releases the row as the module does (sql.h): the owner
 * it had can neither renew nor complete it, the next claim takes it as a
 * new operation and goes on counting its epoch.  "release" applies to
 * keys in progress or of unknown outcome (a retry then runs anew);
 * "forget" to completed keys, whose entries in this nginx's replay tiers
 * go too.
 *
 * Every statement is an op (mysql.h); the request waits (NGX_DONE) and
 * is finalized from the op's handler.  A read whose client leaves is
 * detached.  A change is not: its op's handler logs and counts it
 * whether or not its client is still there, so it is held by a record
 * in the op's own pool that forgets the request when the request ends.
 * A statement given up on at query_timeout, read or change, detached or
 * not, is ended on the server with KILL QUERY: an operator who retries
 * does not pile up scans there.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include "ngx_http_idempotency_admin.h"
#include "ngx_http_idempotency_ctx.h"
#include "ngx_http_idempotency_key.h"
#include "ngx_http_idempotency_sql.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_store.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_metrics.h"


/* what a request asks */
#define NGX_HTTP_IDEMPOTENCY_ADMIN_SHOW       0
#define NGX_HTTP_IDEMPOTENCY_ADMIN_LIST       1
#define NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE    2
#define NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET     3
#define NGX_HTTP_IDEMPOTENCY_ADMIN_NACTIONS   4

#define NGX_HTTP_IDEMPOTENCY_ADMIN_LIMIT      100
#define NGX_HTTP_IDEMPOTENCY_ADMIN_LIMIT_MAX  1000

/* a version is state-epoch-owner-lease: 66 characters at most */
#define NGX_HTTP_IDEMPOTENCY_ADMIN_VERSION_MAX  80

/* the query arguments, by their index in ngx_http_idempotency_admin_args */
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_HASH     0
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY      1
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_SCOPE    2
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIST     3
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIMIT    4
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_ACTION   5
#define NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION  6
#define NGX_HTTP_IDEMPOTENCY_ADMIN_NARGS      7

/* how a column is written in JSON */
#define NGX_HTTP_IDEMPOTENCY_ADMIN_J_TEXT     0
#define NGX_HTTP_IDEMPOTENCY_ADMIN_J_TIME     1
#define NGX_HTTP_IDEMPOTENCY_ADMIN_J_NUMBER   2
#define NGX_HTTP_IDEMPOTENCY_ADMIN_J_BOOL     3
#define NGX_HTTP_IDEMPOTENCY_ADMIN_J_STATE    4

/* a key hash in hex */
#define NGX_HTTP_IDEMPOTENCY_ADMIN_HEX      (2 * NGX_HTTP_IDEMPOTENCY_HASH_LEN)


/* a member of a row's JSON, made of a column */
typedef struct {
    ngx_str_t                            name;
    ngx_uint_t                           type;
} ngx_http_idempotency_admin_member_t;


typedef struct ngx_http_idempotency_admin_s  ngx_http_idempotency_admin_t;


/*
 * A change in flight, in its op's pool: its handler logs and counts the
 * change even when the request has ended (admin is then NULL)
 */
typedef struct {
    ngx_http_idempotency_admin_t        *admin;
    ngx_http_idempotency_store_t        *store;
    ngx_uint_t                           what;
    ngx_uint_t                           was;      /* the version's state */
    ngx_uint_t                           epoch;    /* its epoch, 0: none */
    ngx_str_t                            addr;     /* the client's */
    u_char                   key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
} ngx_http_idempotency_admin_change_t;


/* a row of a listing, rendered, and what orders it */
typedef struct {
    ngx_str_t                            created;
    ngx_str_t                            hash;
    ngx_str_t                            json;
} ngx_http_idempotency_admin_row_t;


struct ngx_http_idempotency_admin_s {
    ngx_http_request_t                  *request;
    ngx_http_idempotency_store_t        *store;
    ngx_uint_t                           what;
    ngx_uint_t                           state;    /* listed */
    ngx_uint_t                           limit;
    ngx_str_t                            args[NGX_HTTP_IDEMPOTENCY_ADMIN_NARGS];
    ngx_str_t                            detail;   /* a bad request's */

    /* in flight: one op, or a listing's op per shard */
    ngx_http_idempotency_op_t          **ops;
    ngx_uint_t                           nops;
    ngx_uint_t                           pending;
    ngx_http_idempotency_admin_change_t *change;

    /* results */
    ngx_str_t                            row;      /* the key's, shown */
    ngx_array_t                         *rows;     /* a listing's, by op */
    ngx_str_t                            error;    /* a store failure */

    u_char                   key_hash[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    u_char                   key_id[NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN];
};


static ngx_int_t ngx_http_idempotency_admin_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_admin_parse(
    ngx_http_idempotency_admin_t *ad);
static ngx_int_t ngx_http_idempotency_admin_split(
    ngx_http_idempotency_admin_t *ad);
static ngx_int_t ngx_http_idempotency_admin_unescape(ngx_pool_t *pool,
    ngx_str_t *src, ngx_str_t *dst);
static ngx_int_t ngx_http_idempotency_admin_parse_list(
    ngx_http_idempotency_admin_t *ad);
static ngx_int_t ngx_http_idempotency_admin_parse_action(
    ngx_http_idempotency_admin_t *ad);
static ngx_int_t ngx_http_idempotency_admin_parse_key(
    ngx_http_idempotency_admin_t *ad);
static ngx_int_t ngx_http_idempotency_admin_bad(
    ngx_http_idempotency_admin_t *ad, const char *fmt, ...);
static ngx_int_t ngx_http_idempotency_admin_start(
    ngx_http_idempotency_admin_t *ad);
static ngx_http_idempotency_op_t *ngx_http_idempotency_admin_op(
    ngx_http_idempotency_admin_t *ad, ngx_http_idempotency_shard_t *shard);
static ngx_int_t ngx_http_idempotency_admin_hold(
    ngx_http_idempotency_admin_t *ad, ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_admin_read(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_admin_kill(ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_admin_killed(ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_admin_collect(
    ngx_http_idempotency_admin_t *ad, ngx_http_idempotency_op_t *op,
    ngx_uint_t i);
static ngx_int_t ngx_http_idempotency_admin_list(
    ngx_http_idempotency_admin_t *ad);
static void ngx_http_idempotency_admin_changed(
    ngx_http_idempotency_op_t *op);
static void ngx_http_idempotency_admin_log_change(
    ngx_http_idempotency_admin_change_t *ch, ngx_log_t *log);
static ngx_int_t ngx_http_idempotency_admin_refused(
    ngx_http_idempotency_admin_t *ad, ngx_http_idempotency_op_t *op);
static ngx_int_t ngx_http_idempotency_admin_not_found(
    ngx_http_idempotency_admin_t *ad);
static void ngx_http_idempotency_admin_failed(
    ngx_http_idempotency_admin_t *ad, ngx_http_idempotency_op_t *op,
    ngx_uint_t what, ngx_log_t *log, ngx_str_t *addr);
static ngx_int_t ngx_http_idempotency_admin_render(ngx_pool_t *pool,
    ngx_http_idempotency_op_t *op, ngx_str_t *fields, ngx_str_t *out);
static void ngx_http_idempotency_admin_finalize(
    ngx_http_idempotency_admin_t *ad, ngx_int_t rc);
static void ngx_http_idempotency_admin_cleanup(void *data);


/*
 * The closed lists of this file, each indexed by its constants above and
 * checked at build time to have an entry for each (module.h)
 */

/* by NGX_HTTP_IDEMPOTENCY_ADMIN_A_*, and the end */
static ngx_str_t  ngx_http_idempotency_admin_args[] = {
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_HASH] = ngx_string("hash"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY] = ngx_string("key"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_SCOPE] = ngx_string("scope"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIST] = ngx_string("list"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIMIT] = ngx_string("limit"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_ACTION] = ngx_string("action"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION] = ngx_string("version"),
    [NGX_HTTP_IDEMPOTENCY_ADMIN_NARGS] = ngx_null_string
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_admin_args,
                                 NGX_HTTP_IDEMPOTENCY_ADMIN_NARGS + 1);


/* by NGX_HTTP_IDEMPOTENCY_ROW_*, and a state no version of the module
 * writes */
static ngx_str_t  ngx_http_idempotency_admin_states[] = {
    [NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS] = ngx_string("in_progress"),
    [NGX_HTTP_IDEMPOTENCY_ROW_DONE] = ngx_string("completed"),
    [NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED] = ngx_string("not_stored"),
    [NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN] = ngx_string("unknown"),
    [NGX_HTTP_IDEMPOTENCY_ROW_RELEASED] = ngx_string("released"),
    [NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED] = ngx_string("executed"),
    [NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED + 1] = ngx_string("invalid")
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_admin_states,
                                 NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED + 2);

#define ngx_http_idempotency_admin_state(state)                              \
    (&ngx_http_idempotency_admin_states[                                     \
        ((state) < 0 || (state) > NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED)         \
        ? NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED + 1 : (state)])


/* by NGX_HTTP_IDEMPOTENCY_ADMIN_*: an op's name, and the changes' words */
static const char  *ngx_http_idempotency_admin_names[] = {
    [NGX_HTTP_IDEMPOTENCY_ADMIN_SHOW] = "admin show",
    [NGX_HTTP_IDEMPOTENCY_ADMIN_LIST] = "admin list",
    [NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE] = "admin release",
    [NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET] = "admin forget"
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_admin_names,
                                 NGX_HTTP_IDEMPOTENCY_ADMIN_NACTIONS);

static const char  *ngx_http_idempotency_admin_done[] = {
    [NGX_HTTP_IDEMPOTENCY_ADMIN_SHOW] = NULL,
    [NGX_HTTP_IDEMPOTENCY_ADMIN_LIST] = NULL,
    [NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE] = "released",
    [NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET] = "forgotten"
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_admin_done,
                                 NGX_HTTP_IDEMPOTENCY_ADMIN_NACTIONS);


/* by op->rc, for the error log and 503's detail */
static const char  *ngx_http_idempotency_admin_rcs[] = {
    [NGX_HTTP_IDEMPOTENCY_OP_OK] = "ok",
    [NGX_HTTP_IDEMPOTENCY_OP_SQL_ERROR] = "SQL error",
    [NGX_HTTP_IDEMPOTENCY_OP_DOWN] = "server down",
    [NGX_HTTP_IDEMPOTENCY_OP_TIMEOUT] = "timed out",
    [NGX_HTTP_IDEMPOTENCY_OP_BUSY] = "no connection free"
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_admin_rcs,
                                 NGX_HTTP_IDEMPOTENCY_OP_BUSY + 1);


/* the row's members, column by column */
static ngx_http_idempotency_admin_member_t  ngx_http_idempotency_admin_members[]
    = {
    { ngx_string("key_hash"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_TEXT },
    { ngx_string("state"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_STATE },
    { ngx_string("epoch"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_NUMBER },
    { ngx_string("created_at"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_TIME },
    { ngx_string("lease_until"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_TIME },
    { ngx_string("expires_at"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_TIME },
    { ngx_string("status"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_NUMBER },
    { ngx_string("stored_bytes"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_NUMBER },
    { ngx_string("renewing"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_BOOL },
    { ngx_string("expired"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_BOOL },
    { ngx_string("version"), NGX_HTTP_IDEMPOTENCY_ADMIN_J_TEXT },
    { ngx_null_string, 0 }
};

/* a member for each column of the operator's row (sql.h), and the end */
NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_admin_members,
                                 NGX_HTTP_IDEMPOTENCY_ADMIN_F_COUNT + 1);


char *
ngx_http_idempotency_admin(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t                      *value;
    ngx_http_core_loc_conf_t       *clcf;
    ngx_http_idempotency_store_t  **sp;

    sp = (ngx_http_idempotency_store_t **) (p + cmd->offset);

    if (*sp) {
        return "is duplicate";
    }

    value = cf->args->elts;

    *sp = ngx_http_idempotency_find_store(cf, &value[1]);
    if (*sp == NULL) {
        return NGX_CONF_ERROR;
    }

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_idempotency_admin_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_idempotency_admin_handler(ngx_http_request_t *r)
{
    ngx_int_t                         rc;
    ngx_pool_cleanup_t               *cln;
    ngx_http_idempotency_admin_t     *ad;
    ngx_http_idempotency_loc_conf_t  *ilcf;

    static ngx_str_t  allow = ngx_string("Allow");
    static ngx_str_t  methods = ngx_string("GET, HEAD, POST");

    ilcf = ngx_http_get_module_loc_conf(r, ngx_http_idempotency_module);

    if (ilcf->admin == NULL) {
        /* cannot happen: "if" blocks inherit the store (merge_loc_conf) */
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "idempotency_admin: no store");
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_POST))) {
        if (ngx_http_idempotency_add_header(r, &allow, &methods) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        return ngx_http_idempotency_problem_ext(r,
                                          NGX_HTTP_IDEMPOTENCY_P_ADMIN_METHOD,
                                          NULL, NULL);
    }

    ad = ngx_pcalloc(r->pool, sizeof(ngx_http_idempotency_admin_t));
    if (ad == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ad->request = r;
    ad->store = ilcf->admin;

    rc = ngx_http_idempotency_admin_parse(ad);

    if (rc == NGX_DECLINED) {
        return ngx_http_idempotency_problem_ext(r,
                                         NGX_HTTP_IDEMPOTENCY_P_ADMIN_REQUEST,
                                         &ad->detail, NULL);
    }

    if (rc != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* whatever is in flight when the request ends is let go */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_idempotency_admin_cleanup;
    cln->data = ad;

    if (ngx_http_idempotency_admin_start(ad) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /*
     * Until the store answers: the phases must not run again (a write
     * event would), and a request whose client closes ends at once (the
     * cleanup lets its op go)
     */

    r->main->count++;
    r->write_event_handler = ngx_http_request_empty_handler;
    r->read_event_handler = ngx_http_test_reading;

    return NGX_DONE;
}


/* ---------------------------------------------------------------- input */


/* NGX_OK, NGX_DECLINED with ad->detail (400), or NGX_ERROR */

static ngx_int_t
ngx_http_idempotency_admin_parse(ngx_http_idempotency_admin_t *ad)
{
    ngx_int_t            rc;
    ngx_str_t           *a;
    ngx_http_request_t  *r;

    r = ad->request;
    a = ad->args;

    if (r->headers_in.content_length_n > 0 || r->headers_in.chunked) {
        return ngx_http_idempotency_admin_bad(ad, "the arguments go in the "
                                              "query string: the request "
                                              "body must be empty");
    }

    rc = ngx_http_idempotency_admin_split(ad);
    if (rc != NGX_OK) {
        return rc;
    }

    if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIST].data) {
        return ngx_http_idempotency_admin_parse_list(ad);
    }

    if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIMIT].data) {
        return ngx_http_idempotency_admin_bad(ad, "limit= goes with list=");
    }

    if (r->method == NGX_HTTP_POST) {
        rc = ngx_http_idempotency_admin_parse_action(ad);
        if (rc != NGX_OK) {
            return rc;
        }

    } else if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_ACTION].data) {
        return ngx_http_idempotency_admin_bad(ad, "action= is sent with "
                                              "POST");

    } else if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION].data) {
        return ngx_http_idempotency_admin_bad(ad, "version= goes with "
                                              "action=");

    } else {
        ad->what = NGX_HTTP_IDEMPOTENCY_ADMIN_SHOW;
    }

    return ngx_http_idempotency_admin_parse_key(ad);
}


/*
 * The query string into ad->args, percent-decoded; every argument is
 * known and given once.  A "+" is a plus sign: a key may have one.
 */

static ngx_int_t
ngx_http_idempotency_admin_split(ngx_http_idempotency_admin_t *ad)
{
    u_char      *p, *last, *amp, *eq, *c;
    ngx_int_t    rc;
    ngx_str_t    name, value;
    ngx_uint_t   i;

    if (ad->request->args.len == 0) {
        return ngx_http_idempotency_admin_bad(ad, "no arguments: give "
                                              "hash=, key= or list=");
    }

    p = ad->request->args.data;
    last = p + ad->request->args.len;

    for ( /* void */ ; p < last; p = amp + 1) {

        amp = ngx_strlchr(p, last, '&');
        if (amp == NULL) {
            amp = last;
        }

        if (amp == p) {
            /* "a=1&&b=2", a trailing "&" */
            continue;
        }

        eq = ngx_strlchr(p, amp, '=');

        name.data = p;
        name.len = (eq ? eq : amp) - p;
        value.data = eq ? eq + 1 : amp;
        value.len = amp - value.data;

        for (i = 0; ngx_http_idempotency_admin_args[i].len; i++) {
            if (name.len == ngx_http_idempotency_admin_args[i].len
                && ngx_strncmp(name.data,
                               ngx_http_idempotency_admin_args[i].data,
                               name.len)
                   == 0)
            {
                break;
            }
        }

        if (ngx_http_idempotency_admin_args[i].len == 0) {

            /* a name is quoted back only when it is plainly a word */

            for (c = name.data; c < name.data + name.len; c++) {
                if (!((*c >= '0' && *c <= '9') || *c == '_' || *c == '-'
                      || ((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z')))
                {
                    break;
                }
            }

            if (name.len && name.len <= 32 && c == name.data + name.len) {
                return ngx_http_idempotency_admin_bad(ad, "unknown argument "
                                                      "\"%V\"", &name);
            }

            return ngx_http_idempotency_admin_bad(ad, "an unknown argument");
        }

        if (ad->args[i].data) {
            return ngx_http_idempotency_admin_bad(ad, "%V= is given twice",
                                                  &name);
        }

        rc = ngx_http_idempotency_admin_unescape(ad->request->pool, &value,
                                                 &ad->args[i]);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED) {
            return ngx_http_idempotency_admin_bad(ad, "%V= has a \"%%\" not "
                                                  "followed by two hex "
                                                  "digits", &name);
        }
    }

    return NGX_OK;
}


/* dst->data is never NULL: an empty argument is there */

static ngx_int_t
ngx_http_idempotency_admin_unescape(ngx_pool_t *pool, ngx_str_t *src,
    ngx_str_t *dst)
{
    u_char     *p, *last, *d;
    ngx_int_t   c;

    d = ngx_pnalloc(pool, src->len + 1);
    if (d == NULL) {
        return NGX_ERROR;
    }

    dst->data = d;

    last = src->data + src->len;

    for (p = src->data; p < last; p++) {

        if (*p != '%') {
            *d++ = *p;
            continue;
        }

        c = (last - p > 2) ? ngx_hextoi(p + 1, 2) : NGX_ERROR;

        if (c == NGX_ERROR) {
            return NGX_DECLINED;
        }

        *d++ = (u_char) c;
        p += 2;
    }

    dst->len = d - dst->data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_admin_parse_list(ngx_http_idempotency_admin_t *ad)
{
    ngx_int_t   n;
    ngx_str_t  *a, *v;

    a = ad->args;

    if (ad->request->method == NGX_HTTP_POST) {
        return ngx_http_idempotency_admin_bad(ad, "list= is read with GET");
    }

    if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_HASH].data
        || a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY].data
        || a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_SCOPE].data
        || a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_ACTION].data
        || a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION].data)
    {
        return ngx_http_idempotency_admin_bad(ad, "list= takes no other "
                                              "argument than limit=");
    }

    v = &a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIST];

    if (v->len == 11 && ngx_strncmp(v->data, "in_progress", 11) == 0) {
        ad->state = NGX_HTTP_IDEMPOTENCY_ROW_PROGRESS;

    } else if (v->len == 7 && ngx_strncmp(v->data, "unknown", 7) == 0) {
        ad->state = NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN;

    } else {
        return ngx_http_idempotency_admin_bad(ad, "list= is in_progress or "
                                              "unknown");
    }

    ad->what = NGX_HTTP_IDEMPOTENCY_ADMIN_LIST;
    ad->limit = NGX_HTTP_IDEMPOTENCY_ADMIN_LIMIT;

    v = &a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_LIMIT];

    if (v->data) {
        n = ngx_atoi(v->data, v->len);

        if (n < 1 || n > NGX_HTTP_IDEMPOTENCY_ADMIN_LIMIT_MAX) {
            return ngx_http_idempotency_admin_bad(ad, "limit= is a number "
                                                  "from 1 to %d",
                                          NGX_HTTP_IDEMPOTENCY_ADMIN_LIMIT_MAX);
        }

        ad->limit = n;
    }

    return NGX_OK;
}


/*
 * The version goes into the statement's text: only the characters a
 * version is made of (digits, upper-case hex, "-") get there.
 */

static ngx_int_t
ngx_http_idempotency_admin_parse_action(ngx_http_idempotency_admin_t *ad)
{
    u_char     *p;
    ngx_str_t  *a, *v;

    a = ad->args;
    v = &a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_ACTION];

    if (v->data == NULL) {
        return ngx_http_idempotency_admin_bad(ad, "a POST needs "
                                              "action=release or "
                                              "action=forget");
    }

    if (v->len == 7 && ngx_strncmp(v->data, "release", 7) == 0) {
        ad->what = NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE;

    } else if (v->len == 6 && ngx_strncmp(v->data, "forget", 6) == 0) {
        ad->what = NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET;

    } else {
        return ngx_http_idempotency_admin_bad(ad, "action= is release or "
                                              "forget");
    }

    v = &a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION];

    if (v->data == NULL) {
        return ngx_http_idempotency_admin_bad(ad, "action= needs version=, "
                                              "the row's \"version\" as "
                                              "GET shows it");
    }

    for (p = v->data; p < v->data + v->len; p++) {
        if (!((*p >= '0' && *p <= '9') || (*p >= 'A' && *p <= 'F')
              || *p == '-'))
        {
            break;
        }
    }

    if (v->len == 0 || v->len > NGX_HTTP_IDEMPOTENCY_ADMIN_VERSION_MAX
        || p != v->data + v->len)
    {
        return ngx_http_idempotency_admin_bad(ad, "version= is not a "
                                              "version as GET shows it "
                                              "(digits, A-F and \"-\")");
    }

    return NGX_OK;
}


/* the key hash: given, or made of key= and scope= as requests make it */

static ngx_int_t
ngx_http_idempotency_admin_parse_key(ngx_http_idempotency_admin_t *ad)
{
    u_char      *p, *last;
    ngx_int_t    rc, c;
    ngx_str_t   *a, raw, key, scope;
    ngx_uint_t   i, zero;
    const char  *reason;

    a = ad->args;

    if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_HASH].data
        && a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY].data)
    {
        return ngx_http_idempotency_admin_bad(ad, "hash= and key= together: "
                                              "give one");
    }

    if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_SCOPE].data
        && a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY].data == NULL)
    {
        return ngx_http_idempotency_admin_bad(ad, "scope= goes with key=");
    }

    if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_HASH].data) {
        raw = a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_HASH];

        if (raw.len != NGX_HTTP_IDEMPOTENCY_ADMIN_HEX) {
            return ngx_http_idempotency_admin_bad(ad, "hash= is 64 hex "
                                                  "digits");
        }

        zero = 1;

        for (i = 0; i < NGX_HTTP_IDEMPOTENCY_HASH_LEN; i++) {
            c = ngx_hextoi(raw.data + 2 * i, 2);

            if (c == NGX_ERROR) {
                return ngx_http_idempotency_admin_bad(ad, "hash= is 64 hex "
                                                      "digits");
            }

            ad->key_hash[i] = (u_char) c;
            zero &= (c == 0);
        }

        if (zero) {
            return ngx_http_idempotency_admin_bad(ad, "the hash of 32 zero "
                                                  "bytes is the purge "
                                                  "lease's row, not a key");
        }

    } else if (a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY].data) {

        /* as the header's value: without the white space around it */

        p = a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY].data;
        last = p + a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_KEY].len;

        while (p < last && (*p == ' ' || *p == '\t')) {
            p++;
        }

        while (last > p && (last[-1] == ' ' || last[-1] == '\t')) {
            last--;
        }

        raw.data = p;
        raw.len = last - p;

        rc = ngx_http_idempotency_parse_key(ad->request->pool, &raw, &key,
                                            &reason);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED) {
            return ngx_http_idempotency_admin_bad(ad, "key=: %s", reason);
        }

        scope = a[NGX_HTTP_IDEMPOTENCY_ADMIN_A_SCOPE];

        if (scope.data == NULL) {
            scope.len = 0;
        }

        if (ngx_http_idempotency_key_hash(&scope, &key, ad->key_hash)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

    } else {
        return ngx_http_idempotency_admin_bad(ad, "give hash=, key= or "
                                              "list=");
    }

    ngx_hex_dump(ad->key_id, ad->key_hash,
                 NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN / 2);

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_admin_bad(ngx_http_idempotency_admin_t *ad,
    const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    p = ngx_pnalloc(ad->request->pool, NGX_MAX_ERROR_STR);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ad->detail.data = p;

    va_start(args, fmt);
    p = ngx_vslprintf(p, p + NGX_MAX_ERROR_STR, fmt, args);
    va_end(args);

    ad->detail.len = p - ad->detail.data;

    return NGX_DECLINED;
}


/* ------------------------------------------------------------ the store */


/* the ops, made first and run only once all are made */

static ngx_int_t
ngx_http_idempotency_admin_start(ngx_http_idempotency_admin_t *ad)
{
    ngx_uint_t                     i;
    ngx_http_idempotency_shard_t  *shards, *shard;

    shards = ad->store->shards.elts;

    ad->nops = (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_LIST)
               ? ad->store->shards.nelts : 1;

    ad->ops = ngx_pcalloc(ad->request->pool,
                          ad->nops * sizeof(ngx_http_idempotency_op_t *));
    if (ad->ops == NULL) {
        return NGX_ERROR;
    }

    if (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_LIST) {
        ad->rows = ngx_pcalloc(ad->request->pool,
                               ad->nops * sizeof(ngx_array_t));
        if (ad->rows == NULL) {
            return NGX_ERROR;
        }
    }

    for (i = 0; i < ad->nops; i++) {
        shard = (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_LIST)
                ? &shards[i]
                : ngx_http_idempotency_shard(ad->store, ad->key_hash);

        ad->ops[i] = ngx_http_idempotency_admin_op(ad, shard);

        if (ad->ops[i] == NULL
            || ngx_http_idempotency_admin_hold(ad, ad->ops[i]) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    for (i = 0; i < ad->nops; i++) {
        ngx_http_idempotency_op_run(ad->ops[i]);
    }

    ad->pending = ad->nops;

    if (ad->what >= NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE) {
        /* running: from now on the request lets go of it, never frees it */
        ad->change = ad->ops[0]->data;
    }

    return NGX_OK;
}


static ngx_http_idempotency_op_t *
ngx_http_idempotency_admin_op(ngx_http_idempotency_admin_t *ad,
    ngx_http_idempotency_shard_t *shard)
{
    ngx_str_t                  *v;
    ngx_uint_t                  forget;
    ngx_http_idempotency_op_t  *op;

    switch (ad->what) {

    case NGX_HTTP_IDEMPOTENCY_ADMIN_SHOW:
        op = ngx_http_idempotency_sql_admin_show(shard,
                                                 ad->request->connection->log,
                                                 ad->key_hash);
        break;

    case NGX_HTTP_IDEMPOTENCY_ADMIN_LIST:
        op = ngx_http_idempotency_sql_admin_list(shard,
                                                 ad->request->connection->log,
                                                 ad->state, ad->limit + 1);
        break;

    default: /* RELEASE, FORGET */

        /* a change may outlive its request, and its connection's log */

        v = &ad->args[NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION];
        forget = (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET);

        op = ngx_http_idempotency_sql_admin_change(shard, ngx_cycle->log,
                                                   ad->key_hash, forget, v);
        break;
    }

    if (op == NULL) {
        return NULL;
    }

    op->name = ngx_http_idempotency_admin_names[ad->what];

    return op;
}


/* what the op reports to: the request, or a change's own record */

static ngx_int_t
ngx_http_idempotency_admin_hold(ngx_http_idempotency_admin_t *ad,
    ngx_http_idempotency_op_t *op)
{
    u_char                               *dash, *end;
    ngx_int_t                             state, epoch;
    ngx_str_t                            *addr, *v;
    ngx_http_idempotency_admin_change_t  *ch;

    if (ad->what < NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE) {
        op->handler = ngx_http_idempotency_admin_read;
        op->data = ad;
        return NGX_OK;
    }

    ch = ngx_pcalloc(op->pool, sizeof(ngx_http_idempotency_admin_change_t));
    if (ch == NULL) {
        return NGX_ERROR;
    }

    addr = &ad->request->connection->addr_text;

    ch->addr.data = ngx_pstrdup(op->pool, addr);
    if (ch->addr.data == NULL) {
        return NGX_ERROR;
    }

    ch->addr.len = addr->len;

    /*
     * A version starts with its row's state: the state the row had when
     * the UPDATE took it (a version of another state never matches)
     */

    v = &ad->args[NGX_HTTP_IDEMPOTENCY_ADMIN_A_VERSION];
    dash = ngx_strlchr(v->data, v->data + v->len, '-');
    state = dash ? ngx_atoi(v->data, dash - v->data) : NGX_ERROR;

    ch->was = (state >= 0 && state <= NGX_HTTP_IDEMPOTENCY_ROW_UNKNOWN)
              ? (ngx_uint_t) state : 0;

    /* and then its epoch: a forget marks it forgotten in the zone */

    end = dash ? ngx_strlchr(dash + 1, v->data + v->len, '-') : NULL;
    epoch = end ? ngx_atoi(dash + 1, end - dash - 1) : NGX_ERROR;

    ch->epoch = (epoch > 0) ? (ngx_uint_t) epoch : 0;
    ch->admin = ad;
    ch->store = ad->store;
    ch->what = ad->what;
    ngx_memcpy(ch->key_hash, ad->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    op->handler = ngx_http_idempotency_admin_changed;
    op->data = ch;

    return NGX_OK;
}


/* a key's row, or one shard's part of a listing */

static void
ngx_http_idempotency_admin_read(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_admin_t  *ad = op->data;

    ngx_int_t            rc;
    ngx_buf_t           *b;
    ngx_uint_t           i;
    ngx_http_request_t  *r;

    r = ad->request;

    for (i = 0; ad->ops[i] != op; i++) { /* void */ }

    ad->ops[i] = NULL;
    ad->pending--;

    ngx_http_idempotency_admin_kill(op);

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK) {
        ngx_http_idempotency_admin_failed(ad, op, ad->what,
                                          r->connection->log,
                                          &r->connection->addr_text);

    } else if (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_LIST) {
        if (ngx_http_idempotency_admin_collect(ad, op, i) != NGX_OK) {
            /* the others still in flight are detached with the request */
            ngx_http_idempotency_admin_finalize(ad,
                                             NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

    } else if (op->nrows
               && ngx_http_idempotency_admin_render(r->pool, op, op->fields,
                                                    &ad->row)
                  != NGX_OK)
    {
        ngx_http_idempotency_admin_finalize(ad,
                                            NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ad->pending) {
        return;
    }

    if (ad->error.len) {
        rc = ngx_http_idempotency_problem_ext(r, NGX_HTTP_IDEMPOTENCY_P_STORE,
                                              &ad->error, NULL);

    } else if (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_LIST) {
        rc = ngx_http_idempotency_admin_list(ad);

    } else if (ad->row.len == 0) {
        rc = ngx_http_idempotency_admin_not_found(ad);

    } else {
        b = ngx_create_temp_buf(r->pool, ad->row.len + 1);
        if (b == NULL) {
            ngx_http_idempotency_admin_finalize(ad, NGX_ERROR);
            return;
        }

        b->last = ngx_cpymem(b->last, ad->row.data, ad->row.len);
        *b->last++ = '\n';

        rc = ngx_http_idempotency_send_json(r, b);
    }

    ngx_http_idempotency_admin_finalize(ad, rc);
}


/*
 * A statement that timed out (or lost its connection) while it ran may
 * still run on the server, which goes on with a scan, or waits for a row
 * lock, though the connection is shut: its thread is sent KILL QUERY on
 * another connection, and nobody waits for the answer.
 */

static void
ngx_http_idempotency_admin_kill(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_op_t  *kill;

    if (!ngx_http_idempotency_op_unsure(op) || op->thread == 0) {
        return;
    }

    kill = ngx_http_idempotency_sql_kill(op->shard, ngx_cycle->log,
                                         op->thread, 1);
    if (kill == NULL) {
        return;
    }

    ngx_log_error(NGX_LOG_NOTICE, ngx_cycle->log, 0,
                  "idempotency store \"%V\" mysql=%V: %s given up on, "
                  "thread id %ui sent KILL QUERY", &op->shard->store->name,
                  &op->shard->name, op->name, op->thread);

    kill->handler = ngx_http_idempotency_admin_killed;
    kill->data = NULL;

    ngx_http_idempotency_op_run(kill);
}


static void
ngx_http_idempotency_admin_killed(ngx_http_idempotency_op_t *op)
{
    /* no such thread: the statement ended on its own */

    if (op->rc == NGX_HTTP_IDEMPOTENCY_OP_OK
        || op->cause == NGX_HTTP_IDEMPOTENCY_CAUSE_NO_THREAD)
    {
        return;
    }

    ngx_log_error(NGX_LOG_WARN, op->log, 0,
                  "idempotency store \"%V\" mysql=%V: %V failed: %s%s%V; "
                  "the statement runs on the server until it ends",
                  &op->shard->store->name, &op->shard->name, &op->sql,
                  ngx_http_idempotency_admin_rcs[ngx_min(op->rc, 4)],
                  op->err_text.len ? ": " : "", &op->err_text);
}


/* one shard's rows, rendered, in the order the shard gave them */

static ngx_int_t
ngx_http_idempotency_admin_collect(ngx_http_idempotency_admin_t *ad,
    ngx_http_idempotency_op_t *op, ngx_uint_t i)
{
    ngx_str_t                         *f;
    ngx_uint_t                         n;
    ngx_http_idempotency_admin_row_t  *row;

    if (ngx_array_init(&ad->rows[i], ad->request->pool, op->nrows + 1,
                       sizeof(ngx_http_idempotency_admin_row_t))
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (op->nrows && op->rows == NULL) {
        return NGX_ERROR;
    }

    for (n = 0; n < op->nrows; n++) {
        f = &op->rows[n * op->nfields];

        row = ngx_array_push(&ad->rows[i]);
        if (row == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_idempotency_admin_render(ad->request->pool, op, f,
                                              &row->json)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        /* what orders the row, copied: the op's pool goes */

        row->hash = f[NGX_HTTP_IDEMPOTENCY_ADMIN_F_HASH];
        row->created = f[NGX_HTTP_IDEMPOTENCY_ADMIN_F_CREATED];

        row->hash.data = ngx_pstrdup(ad->request->pool, &row->hash);
        row->created.data = ngx_pstrdup(ad->request->pool, &row->created);

        if (row->hash.data == NULL || row->created.data == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The shards' rows merged, oldest first, up to the limit: each shard
 * gave its oldest limit + 1, so any more than the limit in all means
 * that the listing is cut
 */

static ngx_int_t
ngx_http_idempotency_admin_list(ngx_http_idempotency_admin_t *ad)
{
    size_t                             len;
    ngx_buf_t                         *b;
    ngx_int_t                          d;
    ngx_uint_t                         i, n, total, best, *next;
    ngx_http_request_t                *r;
    ngx_http_idempotency_admin_row_t  *row, *cand;

    r = ad->request;

    next = ngx_pcalloc(r->pool, ad->nops * sizeof(ngx_uint_t));
    if (next == NULL) {
        return NGX_ERROR;
    }

    len = sizeof("{\"keys\":[],\"limit\":,\"truncated\":false}\n")
          + NGX_INT_T_LEN;
    total = 0;

    for (i = 0; i < ad->nops; i++) {
        row = ad->rows[i].elts;
        total += ad->rows[i].nelts;

        for (n = 0; n < ad->rows[i].nelts; n++) {
            len += row[n].json.len + 1;
        }
    }

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last = ngx_cpymem(b->last, "{\"keys\":[", 9);

    for (n = 0; n < ad->limit; n++) {
        row = NULL;
        best = 0;

        for (i = 0; i < ad->nops; i++) {
            if (next[i] == ad->rows[i].nelts) {
                continue;
            }

            cand = (ngx_http_idempotency_admin_row_t *) ad->rows[i].elts
                   + next[i];

            if (row) {
                d = ngx_memn2cmp(cand->created.data, row->created.data,
                                 cand->created.len, row->created.len);
                if (d == 0) {
                    d = ngx_memn2cmp(cand->hash.data, row->hash.data,
                                     cand->hash.len, row->hash.len);
                }

                if (d >= 0) {
                    continue;
                }
            }

            row = cand;
            best = i;
        }

        if (row == NULL) {
            break;
        }

        next[best]++;

        if (n) {
            *b->last++ = ',';
        }

        b->last = ngx_cpymem(b->last, row->json.data, row->json.len);
    }

    b->last = ngx_sprintf(b->last, "],\"limit\":%ui,\"truncated\":%s}\n",
                          ad->limit, total > ad->limit ? "true" : "false");

    return ngx_http_idempotency_send_json(r, b);
}


/* a release's or a forget's statement ended */

static void
ngx_http_idempotency_admin_changed(ngx_http_idempotency_op_t *op)
{
    ngx_http_idempotency_admin_change_t  *ch = op->data;

    ngx_int_t                      rc, redis;
    ngx_buf_t                     *b;
    ngx_log_t                     *log;
    ngx_http_request_t            *r;
    ngx_http_idempotency_admin_t  *ad;
    u_char                         hex[NGX_HTTP_IDEMPOTENCY_ADMIN_HEX];

    ad = ch->admin;
    r = ad ? ad->request : NULL;
    log = r ? r->connection->log : ngx_cycle->log;

    if (ad) {
        ad->ops[0] = NULL;
        ad->pending = 0;
        ad->change = NULL;
    }

    ngx_http_idempotency_admin_kill(op);

    if (op->rc != NGX_HTTP_IDEMPOTENCY_OP_OK) {
        ngx_http_idempotency_admin_failed(ad, op, ch->what, log, &ch->addr);

        if (r) {
            ngx_http_idempotency_admin_finalize(ad,
                                 ngx_http_idempotency_problem_ext(r,
                                               NGX_HTTP_IDEMPOTENCY_P_STORE,
                                               &ad->error, NULL));
        }

        return;
    }

    redis = NGX_OK;

    if (ch->what == NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET) {

        /*
         * Whatever became of the row: an entry of a key whose row is gone
         * or changed is stale, and dropping an entry is always safe (MySQL
         * answers).  So the same call on another nginx, which finds the
         * row changed (409) or gone (404), drops that nginx's copy too.
         */

        redis = ngx_http_idempotency_tier_forget(ch->store, ch->key_hash,
                                                 ch->epoch);
    }

    if (op->affected_rows == 0) {
        if (r) {
            ngx_http_idempotency_admin_finalize(ad,
                                 ngx_http_idempotency_admin_refused(ad, op));
        }

        return;
    }

    /* the change is made: said and counted, whoever is still there */

    ngx_http_idempotency_admin_log_change(ch, log);

    if (ch->what == NGX_HTTP_IDEMPOTENCY_ADMIN_FORGET) {
        ngx_http_idempotency_metric(ch->store, operator_forgets);

        if (redis != NGX_OK) {
            ngx_log_error(NGX_LOG_WARN, log, 0,
                          "idempotency store \"%V\" redis=%V: DEL of key "
                          "%*xs not sent (Redis is down): its entry there "
                          "replays until its TTL ends", &ch->store->name,
                          &ch->store->redis_name,
                          (size_t) NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN / 2,
                          ch->key_hash);
        }

    } else {
        ngx_http_idempotency_metric(ch->store, operator_releases);
    }

    if (r == NULL) {
        return;
    }

    b = ngx_create_temp_buf(r->pool, 256);
    if (b == NULL) {
        ngx_http_idempotency_admin_finalize(ad, NGX_ERROR);
        return;
    }

    ngx_hex_dump(hex, ch->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);

    b->last = ngx_slprintf(b->last, b->end, "{\"key_hash\":\"%*s\","
                           "\"action\":\"%s\",\"was\":\"%V\"%s}\n",
                           sizeof(hex), hex,
                           ngx_http_idempotency_admin_done[ch->what],
                           &ngx_http_idempotency_admin_states[ch->was],
                           ch->store->redis_name.len == 0 ? ""
                           : redis == NGX_OK ? ",\"redis\":\"sent\""
                           : ",\"redis\":\"not_sent\"");

    rc = ngx_http_idempotency_send_json(r, b);

    ngx_http_idempotency_admin_finalize(ad, rc);
}


static void
ngx_http_idempotency_admin_log_change(ngx_http_idempotency_admin_change_t *ch,
    ngx_log_t *log)
{
    ngx_log_error(NGX_LOG_NOTICE, log, 0,
                  "idempotency store \"%V\": key %*xs %s by an operator "
                  "(was %V; key hash %*xs; client %V)",
                  &ch->store->name,
                  (size_t) NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN / 2, ch->key_hash,
                  ngx_http_idempotency_admin_done[ch->what],
                  &ngx_http_idempotency_admin_states[ch->was],
                  (size_t) NGX_HTTP_IDEMPOTENCY_HASH_LEN, ch->key_hash,
                  &ch->addr);
}


/*
 * No row changed: the key is gone (404), or its row is not what the
 * operator saw, or is in a state the action does not apply to (409, with
 * the row as it is now)
 */

static ngx_int_t
ngx_http_idempotency_admin_refused(ngx_http_idempotency_admin_t *ad,
    ngx_http_idempotency_op_t *op)
{
    ngx_int_t            state;
    ngx_str_t            row, members, detail, *name;
    ngx_uint_t           problem, done;
    ngx_http_request_t  *r;

    r = ad->request;

    if (op->nrows == 0) {
        return ngx_http_idempotency_admin_not_found(ad);
    }

    if (ngx_http_idempotency_admin_render(r->pool, op, op->fields, &row)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    members.data = ngx_pnalloc(r->pool, sizeof("\"current\":") + row.len);
    if (members.data == NULL) {
        return NGX_ERROR;
    }

    members.len = ngx_sprintf(members.data, "\"current\":%V", &row)
                  - members.data;

    state = ngx_http_idempotency_field_int(
                &op->fields[NGX_HTTP_IDEMPOTENCY_ADMIN_F_STATE]);

    /* the action that applies to the state: forget to a key that ran
     * (completed, not stored, executed by its marker), release to one in
     * progress or of unknown outcome; a released key is free already */

    done = (state == NGX_HTTP_IDEMPOTENCY_ROW_DONE
            || state == NGX_HTTP_IDEMPOTENCY_ROW_UNSTORED
            || state == NGX_HTTP_IDEMPOTENCY_ROW_EXECUTED);

    if (state != NGX_HTTP_IDEMPOTENCY_ROW_RELEASED
        && (ad->what == NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE) == !done)
    {
        problem = NGX_HTTP_IDEMPOTENCY_P_CHANGED;
        ngx_str_null(&detail);

    } else {
        problem = NGX_HTTP_IDEMPOTENCY_P_NOT_APPLICABLE;
        name = ngx_http_idempotency_admin_state(state);

        if (ngx_http_idempotency_admin_bad(ad,
                 state == NGX_HTTP_IDEMPOTENCY_ROW_RELEASED
                 ? "The key's state is %V: it is free already, and the "
                   "next request with it runs (after its fence, where "
                   "one is configured)."
                 : done
                 ? "The key's state is %V: release applies to keys in "
                   "progress or of unknown outcome.  To let a retry run "
                   "again, use action=forget."
                 : "The key's state is %V: forget applies to keys that "
                   "ran (completed, not stored, executed).  To let a "
                   "retry run again, use action=release.",
                 name)
            == NGX_ERROR)
        {
            return NGX_ERROR;
        }

        detail = ad->detail;
    }

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "idempotency store \"%V\": %s of key %*s refused: the "
                  "row is %V, version %V", &ad->store->name,
                  ngx_http_idempotency_admin_names[ad->what],
                  (size_t) NGX_HTTP_IDEMPOTENCY_KEY_ID_LEN, ad->key_id,
                  ngx_http_idempotency_admin_state(state),
                  &op->fields[NGX_HTTP_IDEMPOTENCY_ADMIN_F_VERSION]);

    return ngx_http_idempotency_problem_ext(r, problem,
                                            detail.len ? &detail : NULL,
                                            &members);
}


static ngx_int_t
ngx_http_idempotency_admin_not_found(ngx_http_idempotency_admin_t *ad)
{
    u_char     *p;
    ngx_str_t   members;

    p = ngx_pnalloc(ad->request->pool, sizeof("\"key_hash\":\"\"")
                                       + NGX_HTTP_IDEMPOTENCY_ADMIN_HEX);
    if (p == NULL) {
        return NGX_ERROR;
    }

    members.data = p;

    p = ngx_cpymem(p, "\"key_hash\":\"", 12);
    p = ngx_hex_dump(p, ad->key_hash, NGX_HTTP_IDEMPOTENCY_HASH_LEN);
    *p++ = '"';

    members.len = p - members.data;

    return ngx_http_idempotency_problem_ext(ad->request,
                                            NGX_HTTP_IDEMPOTENCY_P_NOT_FOUND,
                                            NULL, &members);
}


/*
 * A statement failed: an error line (a change's names its client, whose
 * request may be gone), and, with the request, the 503's detail
 */

static void
ngx_http_idempotency_admin_failed(ngx_http_idempotency_admin_t *ad,
    ngx_http_idempotency_op_t *op, ngx_uint_t what, ngx_log_t *log,
    ngx_str_t *addr)
{
    size_t       len;
    const char  *rc;

    rc = ngx_http_idempotency_admin_rcs[ngx_min(op->rc, 4)];

    ngx_log_error(NGX_LOG_ERR, log, 0,
                  "idempotency store \"%V\" mysql=%V: %s failed: %s%s%V "
                  "(client %V)", &op->shard->store->name, &op->shard->name,
                  op->name, rc, op->err_text.len ? ": " : "",
                  &op->err_text, addr);

    if (ad == NULL || ad->error.len) {
        /* the request is gone, or a shard of the listing failed first */
        return;
    }

    len = sizeof("The store failed (mysql=: ): the change may or may not "
                 "have been made; read the key again.")
          + op->shard->name.len + ngx_strlen(rc) + op->err_text.len + 2;

    ad->error.data = ngx_pnalloc(ad->request->pool, len);
    if (ad->error.data == NULL) {
        ngx_str_set(&ad->error, "The store failed.");
        return;
    }

    ad->error.len = ngx_snprintf(ad->error.data, len,
                                 "The store failed (mysql=%V: %s%s%V)%s",
                                 &op->shard->name, rc,
                                 op->err_text.len ? ": " : "",
                                 &op->err_text,
                                 what >= NGX_HTTP_IDEMPOTENCY_ADMIN_RELEASE
                                 ? ": the change may or may not have "
                                          "been made; read the key again."
                                        : ".")
                    - ad->error.data;
}


/*
 * A row's JSON, in pool: the columns are the module's own SQL functions'
 * (hex, digits, times), and the server's name, escaped, says which shard
 */

static ngx_int_t
ngx_http_idempotency_admin_render(ngx_pool_t *pool,
    ngx_http_idempotency_op_t *op, ngx_str_t *fields, ngx_str_t *out)
{
    u_char                               *p;
    size_t                                len, escape;
    ngx_int_t                             state;
    ngx_str_t                            *f, *server;
    ngx_uint_t                            i;
    ngx_http_idempotency_admin_member_t  *m;

    if (op->nfields < NGX_HTTP_IDEMPOTENCY_ADMIN_F_COUNT) {
        ngx_log_error(NGX_LOG_ALERT, op->log, 0,
                      "idempotency admin: %ui columns, %d expected",
                      op->nfields, NGX_HTTP_IDEMPOTENCY_ADMIN_F_COUNT);
        return NGX_ERROR;
    }

    server = &op->shard->name;
    escape = ngx_escape_json(NULL, server->data, server->len);

    len = sizeof("{\"server\":\"\"}") + server->len + escape;

    for (i = 0, m = ngx_http_idempotency_admin_members; m->name.len;
         i++, m++)
    {
        /* "name":"value", or a word (null, true, a state's name) */
        len += m->name.len + fields[i].len + sizeof("\"\":\"Z\",") + 16;
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;
    *p++ = '{';

    for (i = 0, m = ngx_http_idempotency_admin_members; m->name.len;
         i++, m++)
    {
        f = &fields[i];

        p = ngx_sprintf(p, "\"%V\":", &m->name);

        if (f->data == NULL) {
            p = ngx_cpymem(p, "null,", 5);
            continue;
        }

        switch (m->type) {

        case NGX_HTTP_IDEMPOTENCY_ADMIN_J_TEXT:
            p = ngx_sprintf(p, "\"%V\",", f);
            break;

        case NGX_HTTP_IDEMPOTENCY_ADMIN_J_TIME:
            p = ngx_sprintf(p, "\"%VZ\",", f);
            break;

        case NGX_HTTP_IDEMPOTENCY_ADMIN_J_NUMBER:
            p = ngx_sprintf(p, "%V,", f);
            break;

        case NGX_HTTP_IDEMPOTENCY_ADMIN_J_BOOL:
            p = ngx_sprintf(p, "%s,", (f->len == 1 && f->data[0] == '1')
                                      ? "true" : "false");
            break;

        default: /* NGX_HTTP_IDEMPOTENCY_ADMIN_J_STATE */
            state = ngx_http_idempotency_field_int(f);
            p = ngx_sprintf(p, "\"%V\",",
                            ngx_http_idempotency_admin_state(state));
            break;
        }
    }

    p = ngx_cpymem(p, "\"server\":\"", 10);
    p = (u_char *) ngx_escape_json(p, server->data, server->len);
    p = ngx_cpymem(p, "\"}", 2);

    out->len = p - out->data;

    return NGX_OK;
}


/*
 * The answer is out (or failed): the request ends as any other.  Ops of
 * a listing still in flight (after an error) are let go first: the
 * request may live on to send its answer, and must not hear from them.
 */

static void
ngx_http_idempotency_admin_finalize(ngx_http_idempotency_admin_t *ad,
    ngx_int_t rc)
{
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ad->request;
    c = r->connection;

    ngx_http_idempotency_admin_cleanup(ad);

    ngx_http_set_log_request(c->log, r);

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * the request ends: reads in flight are detached (all of them ran once
 * any is pending), a change goes on
 */

static void
ngx_http_idempotency_admin_cleanup(void *data)
{
    ngx_http_idempotency_admin_t  *ad = data;

    ngx_uint_t  i;

    if (ad->change) {
        ad->change->admin = NULL;
        ad->change = NULL;
        ad->ops[0] = NULL;
    }

    for (i = 0; i < ad->nops; i++) {
        if (ad->ops[i]) {
            ngx_http_idempotency_op_detach(ad->ops[i]);

            if (ad->pending) {
                /* it runs: still to be ended if it times out */
                ad->ops[i]->handler = ngx_http_idempotency_admin_kill;
            }

            ad->ops[i] = NULL;
        }
    }
}
