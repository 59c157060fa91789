
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: directives, variables, module glue.
 */


#include "ngx_http_idempotency_module.h"
#include "ngx_http_idempotency_filter.h"
#include "ngx_http_idempotency_handler.h"
#include "ngx_http_idempotency_keysrc.h"
#include "ngx_http_idempotency_signature.h"
#include "ngx_http_idempotency_outcome.h"
#include "ngx_http_idempotency_mysql.h"
#include "ngx_http_idempotency_redis.h"
#include "ngx_http_idempotency_cache.h"
#include "ngx_http_idempotency_entry.h"
#include "ngx_http_idempotency_tier.h"
#include "ngx_http_idempotency_purge.h"
#include "ngx_http_idempotency_key.h"
#include "ngx_http_idempotency_store.h"
#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_prometheus.h"
#include "ngx_http_idempotency_issue.h"
#include "ngx_http_idempotency_admin.h"
#include "ngx_http_idempotency_resend.h"
#include "ngx_http_idempotency_fence.h"
#include "ngx_http_idempotency_complete.h"
#include "ngx_http_idempotency_problem.h"
#include "ngx_http_idempotency_ctx.h"


#define NGX_HTTP_IDEMPOTENCY_MAX_RESPONSE  (256 * 1024 * 1024)

#define ngx_http_idempotency_word_char(c)                                    \
    (((c) >= '0' && (c) <= '9') || (((c) | 0x20) >= 'a'                      \
                                    && ((c) | 0x20) <= 'z'))


static char *ngx_http_idempotency(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idempotency_methods(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idempotency_skip_header(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_idempotency_store_status(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_idempotency_merge_keep(ngx_conf_t *cf,
    ngx_http_idempotency_loc_conf_t *conf,
    ngx_http_idempotency_loc_conf_t *prev);
static char *ngx_http_idempotency_on_store_error(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_idempotency_set_sec(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_idempotency_set_msec(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_idempotency_set_size(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_idempotency_set_header(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_idempotency_bad_value(ngx_conf_t *cf,
    ngx_command_t *cmd, char *rv, const char *expected);

static ngx_int_t ngx_http_idempotency_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_idempotency_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_idempotency_key_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_idempotency_epoch_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_http_idempotency_ctx_t *ngx_http_idempotency_claimed(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_tier_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);

static char *ngx_http_idempotency_check_capture_memory(ngx_conf_t *cf,
    void *post, void *data);
static void *ngx_http_idempotency_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_idempotency_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_idempotency_create_loc_conf(ngx_conf_t *cf);
static ngx_int_t ngx_http_idempotency_check_fence(ngx_conf_t *cf,
    ngx_http_idempotency_loc_conf_t *conf);
static ngx_int_t ngx_http_idempotency_check_lease(ngx_log_t *log,
    ngx_http_idempotency_store_t *store, ngx_msec_t lease);
static ngx_http_upstream_conf_t *ngx_http_idempotency_upstream_conf(
    ngx_cycle_t *cycle, void **loc_conf, ngx_uint_t m, ngx_uint_t *n);
static ngx_int_t ngx_http_idempotency_protect(ngx_conf_t *cf);
static void ngx_http_idempotency_check_resend(ngx_conf_t *cf);
static char *ngx_http_idempotency_merge_loc_conf(ngx_conf_t *cf,
    void *parent, void *child);
static ngx_int_t ngx_http_idempotency_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_idempotency_init_process(ngx_cycle_t *cycle);
static void ngx_http_idempotency_exit_process(ngx_cycle_t *cycle);


static ngx_conf_post_handler_pt  ngx_http_idempotency_capture_memory_bounds =
    ngx_http_idempotency_check_capture_memory;

static ngx_conf_num_bounds_t  ngx_http_idempotency_max_held_bounds = {
    ngx_conf_check_num_bounds, 0, 1000000
};

static ngx_conf_num_bounds_t  ngx_http_idempotency_max_attempts_bounds = {
    ngx_conf_check_num_bounds, 1, 1000000
};


static ngx_conf_enum_t  ngx_http_idempotency_unknown[] = {
    { ngx_string("keep"), NGX_HTTP_IDEMPOTENCY_UNKNOWN_KEEP },
    { ngx_string("release"), NGX_HTTP_IDEMPOTENCY_UNKNOWN_RELEASE },
    { ngx_string("redrive"), NGX_HTTP_IDEMPOTENCY_UNKNOWN_REDRIVE },
    { ngx_null_string, 0 }
};


static ngx_conf_enum_t  ngx_http_idempotency_keys[] = {
    { ngx_string("any"), NGX_HTTP_IDEMPOTENCY_KEYS_ANY },
    { ngx_string("issued"), NGX_HTTP_IDEMPOTENCY_KEYS_ISSUED },
    { ngx_null_string, 0 }
};


static ngx_command_t  ngx_http_idempotency_commands[] = {

    { ngx_string("idempotency_store"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_2MORE,
      ngx_http_idempotency_store_block,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency_methods"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idempotency_methods,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, methods),
      NULL },

    { ngx_string("idempotency_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, header),
      NULL },

    { ngx_string("idempotency_key"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idempotency_key_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency_signature"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idempotency_signature_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency_required"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, required),
      NULL },

    { ngx_string("idempotency_scope"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, scope),
      NULL },

    { ngx_string("idempotency_fingerprint"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, fingerprint),
      NULL },

    { ngx_string("idempotency_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_sec,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, ttl),
      NULL },

    { ngx_string("idempotency_lease"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_msec,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, lease),
      NULL },

    { ngx_string("idempotency_wait"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_msec,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, wait),
      NULL },

    { ngx_string("idempotency_store_5xx"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, store_5xx),
      NULL },

    { ngx_string("idempotency_store_status"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idempotency_store_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency_max_response_size"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_size,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, max_response_size),
      NULL },

    { ngx_string("idempotency_replay_skip_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_idempotency_skip_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, skip_headers),
      NULL },

    { ngx_string("idempotency_on_store_error"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_on_store_error,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, on_store_error),
      NULL },

    { ngx_string("idempotency_on_unknown_outcome"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, on_unknown),
      &ngx_http_idempotency_unknown },

    { ngx_string("idempotency_epoch_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, epoch_header),
      NULL },

    { ngx_string("idempotency_attempt_header"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_set_header,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, attempt_header),
      NULL },

    { ngx_string("idempotency_max_attempts"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, max_attempts),
      &ngx_http_idempotency_max_attempts_bounds },

    { ngx_string("idempotency_fence"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE123,
      ngx_http_idempotency_fence_directive,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency_key_issuer"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS|NGX_CONF_TAKE1,
      ngx_http_idempotency_key_issuer,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("idempotency_keys"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, keys),
      &ngx_http_idempotency_keys },

    { ngx_string("idempotency_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_idempotency_metrics,
      0,
      0,
      NULL },

    { ngx_string("idempotency_admin"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_idempotency_admin,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_idempotency_loc_conf_t, admin),
      NULL },

    { ngx_string("idempotency_capture_memory"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idempotency_main_conf_t, capture_memory),
      &ngx_http_idempotency_capture_memory_bounds },

    { ngx_string("idempotency_max_held"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_idempotency_main_conf_t, max_held),
      &ngx_http_idempotency_max_held_bounds },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_idempotency_module_ctx = {
    ngx_http_idempotency_add_variables,    /* preconfiguration */
    ngx_http_idempotency_init,             /* postconfiguration */

    ngx_http_idempotency_create_main_conf, /* create main configuration */
    ngx_http_idempotency_init_main_conf,   /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_idempotency_create_loc_conf,  /* create location configuration */
    ngx_http_idempotency_merge_loc_conf    /* merge location configuration */
};


ngx_module_t  ngx_http_idempotency_module = {
    NGX_MODULE_V1,
    &ngx_http_idempotency_module_ctx,      /* module context */
    ngx_http_idempotency_commands,         /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_idempotency_init_process,     /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_idempotency_exit_process,     /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


ngx_str_t  ngx_http_idempotency_status_names[] = {
    [NGX_HTTP_IDEMPOTENCY_BYPASS] = ngx_string("bypass"),
    [NGX_HTTP_IDEMPOTENCY_NEW] = ngx_string("new"),
    [NGX_HTTP_IDEMPOTENCY_REPLAY] = ngx_string("replay"),
    [NGX_HTTP_IDEMPOTENCY_CONFLICT] = ngx_string("conflict"),
    [NGX_HTTP_IDEMPOTENCY_MISMATCH] = ngx_string("mismatch"),
    [NGX_HTTP_IDEMPOTENCY_INVALID] = ngx_string("invalid"),
    [NGX_HTTP_IDEMPOTENCY_MISSING] = ngx_string("missing"),
    [NGX_HTTP_IDEMPOTENCY_TAKEOVER] = ngx_string("takeover"),
    [NGX_HTTP_IDEMPOTENCY_ERROR] = ngx_string("error"),
    [NGX_HTTP_IDEMPOTENCY_UNSTORED] = ngx_string("unstored"),
    [NGX_HTTP_IDEMPOTENCY_NOSCOPE] = ngx_string("noscope"),
    [NGX_HTTP_IDEMPOTENCY_UNKNOWN] = ngx_string("unknown"),
    [NGX_HTTP_IDEMPOTENCY_FIND] = ngx_string("find"),
    [NGX_HTTP_IDEMPOTENCY_REDRIVE] = ngx_string("redrive"),
    [NGX_HTTP_IDEMPOTENCY_EXHAUSTED] = ngx_string("exhausted"),
    [NGX_HTTP_IDEMPOTENCY_UNVERIFIED] = ngx_string("unverified")
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_status_names,
                                 NGX_HTTP_IDEMPOTENCY_NSTATUSES);


ngx_str_t  ngx_http_idempotency_tier_names[] = {
    [NGX_HTTP_IDEMPOTENCY_TIER_NONE] = ngx_null_string,
    [NGX_HTTP_IDEMPOTENCY_TIER_SHM] = ngx_string("shm"),
    [NGX_HTTP_IDEMPOTENCY_TIER_REDIS] = ngx_string("redis"),
    [NGX_HTTP_IDEMPOTENCY_TIER_MYSQL] = ngx_string("mysql")
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_tier_names,
                                 NGX_HTTP_IDEMPOTENCY_NTIERS);


static ngx_http_variable_t  ngx_http_idempotency_vars[] = {

    { ngx_string("idempotency_status"), NULL,
      ngx_http_idempotency_status_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idempotency_key"), NULL,
      ngx_http_idempotency_key_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idempotency_key_id"), NULL,
      ngx_http_idempotency_key_variable, 1,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idempotency_tier"), NULL,
      ngx_http_idempotency_tier_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idempotency_key_hash"), NULL,
      ngx_http_idempotency_epoch_variable, 1,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idempotency_epoch"), NULL,
      ngx_http_idempotency_epoch_variable, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("idempotency_marker"), NULL,
      ngx_http_idempotency_epoch_variable, 2,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_conf_bitmask_t  ngx_http_idempotency_method_names[] = {
    { ngx_string("GET"), NGX_HTTP_GET },
    { ngx_string("HEAD"), NGX_HTTP_HEAD },
    { ngx_string("POST"), NGX_HTTP_POST },
    { ngx_string("PUT"), NGX_HTTP_PUT },
    { ngx_string("DELETE"), NGX_HTTP_DELETE },
    { ngx_string("PATCH"), NGX_HTTP_PATCH },
    { ngx_string("OPTIONS"), NGX_HTTP_OPTIONS },
    { ngx_null_string, 0 }
};


static char *
ngx_http_idempotency(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_str_t  *value;

    if (ilcf->store != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 3 && ngx_strncmp(value[1].data, "off", 3) == 0) {
        ilcf->store = NULL;
        return NGX_CONF_OK;
    }

    ilcf->store = ngx_http_idempotency_find_store(cf, &value[1]);
    if (ilcf->store == NULL) {
        return NGX_CONF_ERROR;
    }

    ilcf->store->keys = 1;

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_methods(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_str_t           *value;
    ngx_uint_t           i;
    ngx_conf_bitmask_t  *m;

    if (ilcf->methods) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        for (m = ngx_http_idempotency_method_names; m->name.len; m++) {
            if (m->name.len == value[i].len
                && ngx_strncmp(m->name.data, value[i].data, m->name.len)
                   == 0)
            {
                break;
            }
        }

        if (m->name.len == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid method \"%V\" in "
                               "\"idempotency_methods\" directive, it must "
                               "be one of GET HEAD POST PUT DELETE PATCH "
                               "OPTIONS", &value[i]);
            return NGX_CONF_ERROR;
        }

        ilcf->methods |= m->mask;
    }

    return NGX_CONF_OK;
}


/*
 * The answers that are stored: "2xx", "3xx", "4xx" or "5xx" for a class,
 * or a status.  A class leaves out the transient refusals, 408, 425 and
 * 429 (the operation did not run: a retry after them must run it); a
 * status named on its own is stored whatever its class.
 */

static ngx_uint_t  ngx_http_idempotency_transient[] = { 408, 425, 429 };


static void
ngx_http_idempotency_keep_class(u_char *keep, ngx_uint_t from)
{
    ngx_uint_t  s, i;

    for (s = from; s < from + 100; s++) {
        keep[s >> 3] |= 1 << (s & 7);
    }

    for (i = 0; i < sizeof(ngx_http_idempotency_transient)
                    / sizeof(ngx_http_idempotency_transient[0]); i++)
    {
        s = ngx_http_idempotency_transient[i];

        if (s >= from && s < from + 100) {
            keep[s >> 3] &= ~(1 << (s & 7));
        }
    }
}


static char *
ngx_http_idempotency_store_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;
    ngx_uint_t  i;

    if (ilcf->keep) {
        return "is duplicate";
    }

    ilcf->keep = ngx_pcalloc(cf->pool,
                             NGX_HTTP_IDEMPOTENCY_STATUS_BITS / 8 + 1);
    if (ilcf->keep == NULL) {
        return NGX_CONF_ERROR;
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {

        if (value[i].len == 3 && value[i].data[0] >= '2'
            && value[i].data[0] <= '5'
            && (value[i].data[1] | 0x20) == 'x'
            && (value[i].data[2] | 0x20) == 'x')
        {
            ngx_http_idempotency_keep_class(ilcf->keep,
                                            (value[i].data[0] - '0') * 100);
            continue;
        }

        n = (value[i].len == 3) ? ngx_atoi(value[i].data, 3) : NGX_ERROR;

        if (n < 200 || n > 599) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\": expected "
                               "a status from 200 to 599, or one of 2xx, "
                               "3xx, 4xx, 5xx", &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        ilcf->keep[n >> 3] |= 1 << (n & 7);
    }

    return NGX_CONF_OK;
}


/*
 * The merged set: the location's, an outer level's, or the default
 * "2xx 3xx 4xx"; "idempotency_store_5xx on" adds 5xx.
 */

static ngx_int_t
ngx_http_idempotency_merge_keep(ngx_conf_t *cf,
    ngx_http_idempotency_loc_conf_t *conf,
    ngx_http_idempotency_loc_conf_t *prev)
{
    u_char  *keep;

    /* the same bits each time: a static array outlives a reload's pool */
    static u_char  dflt[NGX_HTTP_IDEMPOTENCY_STATUS_BITS / 8 + 1];

    if (conf->keep == NULL) {
        conf->keep = prev->keep;
    }

    if (conf->keep == NULL) {
        ngx_http_idempotency_keep_class(dflt, 200);
        ngx_http_idempotency_keep_class(dflt, 300);
        ngx_http_idempotency_keep_class(dflt, 400);

        conf->keep = dflt;
    }

    if (conf->store_5xx == 1) {
        keep = ngx_pnalloc(cf->pool, NGX_HTTP_IDEMPOTENCY_STATUS_BITS / 8 + 1);
        if (keep == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(keep, conf->keep, NGX_HTTP_IDEMPOTENCY_STATUS_BITS / 8 + 1);
        ngx_http_idempotency_keep_class(keep, 500);
        conf->keep = keep;
    }

    return NGX_OK;
}


/* header names kept out of stored records; "off" cancels inherited ones */

static char *
ngx_http_idempotency_skip_header(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_str_t   *value, *name;
    ngx_uint_t   i, j;

    if (ilcf->skip_headers != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        ilcf->skip_headers = NULL;
        return NGX_CONF_OK;
    }

    ilcf->skip_headers = ngx_array_create(cf->pool, cf->args->nelts - 1,
                                          sizeof(ngx_str_t));
    if (ilcf->skip_headers == NULL) {
        return NGX_CONF_ERROR;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        for (j = 0; j < value[i].len; j++) {
            if (value[i].data[j] <= 0x20 || value[i].data[j] >= 0x7f
                || value[i].data[j] == ':')
            {
                return ngx_http_idempotency_bad_value(cf, cmd,
                                                      NGX_CONF_ERROR,
                                                      "it must be a header "
                                                      "name");
            }
        }

        name = ngx_array_push(ilcf->skip_headers);
        if (name == NULL) {
            return NGX_CONF_ERROR;
        }

        *name = value[i];
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_on_store_error(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_idempotency_loc_conf_t  *ilcf = conf;

    ngx_str_t  *value;

    if (ilcf->on_store_error != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "reject") == 0) {
        ilcf->on_store_error = NGX_HTTP_IDEMPOTENCY_STORE_REJECT;

    } else if (ngx_strcmp(value[1].data, "pass") == 0) {
        ilcf->on_store_error = NGX_HTTP_IDEMPOTENCY_STORE_PASS;

    } else {
        return ngx_http_idempotency_bad_value(cf, cmd, NGX_CONF_ERROR,
                                              "it must be \"reject\" or "
                                              "\"pass\"");
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_set_sec(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *rv;

    rv = ngx_conf_set_sec_slot(cf, cmd, conf);

    if (rv == NGX_CONF_OK
        && *(time_t *) ((char *) conf + cmd->offset) == 0)
    {
        rv = NGX_CONF_ERROR;
    }

    return ngx_http_idempotency_bad_value(cf, cmd, rv,
                                          "it must be a time of at least 1s, "
                                          "such as 24h");
}


static char *
ngx_http_idempotency_set_msec(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char  *rv;

    rv = ngx_conf_set_msec_slot(cf, cmd, conf);

    /* a zero lease would let any duplicate take over at once */

    if (rv == NGX_CONF_OK
        && cmd->offset == offsetof(ngx_http_idempotency_loc_conf_t, lease)
        && *(ngx_msec_t *) ((char *) conf + cmd->offset) < 100)
    {
        return ngx_http_idempotency_bad_value(cf, cmd, NGX_CONF_ERROR,
                                              "the lease must be at least "
                                              "100ms");
    }

    return ngx_http_idempotency_bad_value(cf, cmd, rv,
                                          "it must be a time, such as 30s "
                                          "or 500ms");
}


static char *
ngx_http_idempotency_set_size(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char  *rv;

    rv = ngx_conf_set_size_slot(cf, cmd, conf);

    /* the stored record travels in one statement (max_allowed_packet) */

    if (rv == NGX_CONF_OK
        && *(size_t *) ((char *) conf + cmd->offset)
           > NGX_HTTP_IDEMPOTENCY_MAX_RESPONSE)
    {
        rv = NGX_CONF_ERROR;
    }

    return ngx_http_idempotency_bad_value(cf, cmd, rv,
                                          "it must be a size up to 256m");
}


static char *
ngx_http_idempotency_set_header(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    char        *rv;
    u_char      *p;
    ngx_str_t   *value;

    rv = ngx_conf_set_str_slot(cf, cmd, conf);

    if (rv != NGX_CONF_OK) {
        return rv;
    }

    value = cf->args->elts;

    if (cmd->offset != offsetof(ngx_http_idempotency_loc_conf_t, header)
        && ngx_strcmp(value[1].data, "off") == 0)
    {
        /* set, and empty: a location below turns off what one above
         * set (or the default) */
        ngx_str_set((ngx_str_t *) ((u_char *) conf + cmd->offset), "");
        return NGX_CONF_OK;
    }

    for (p = value[1].data; p < value[1].data + value[1].len; p++) {
        if (!(ngx_http_idempotency_word_char(*p) || *p == '-' || *p == '_')) {
            rv = NGX_CONF_ERROR;
            break;
        }
    }

    if (value[1].len == 0) {
        rv = NGX_CONF_ERROR;
    }

    return ngx_http_idempotency_bad_value(cf, cmd, rv,
                                          "it must be a header name");
}


static char *
ngx_http_idempotency_bad_value(ngx_conf_t *cf, ngx_command_t *cmd, char *rv,
    const char *expected)
{
    ngx_str_t  *value;

    if (rv == NGX_CONF_OK
        || (rv != NGX_CONF_ERROR && ngx_strcmp(rv, "is duplicate") == 0))
    {
        return rv;
    }

    value = cf->args->elts;

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, %s",
                       &value[1], &cmd->name, expected);

    return NGX_CONF_ERROR;
}


static ngx_int_t
ngx_http_idempotency_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_idempotency_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_uint_t                   status;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_get_ctx(r->main);

    status = ctx ? ctx->status : NGX_HTTP_IDEMPOTENCY_BYPASS;

    v->len = ngx_http_idempotency_status_names[status].len;
    v->data = ngx_http_idempotency_status_names[status].data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* the key itself, or (data 1) its id: what the error log names it by */

static ngx_int_t
ngx_http_idempotency_key_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_str_t                   *key;
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_get_ctx(r->main);

    key = ctx == NULL ? NULL : data ? &ctx->key_id : &ctx->key;

    if (key == NULL || key->len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = key->len;
    v->data = key->data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static ngx_int_t
ngx_http_idempotency_tier_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_get_ctx(r->main);

    if (ctx == NULL || ctx->tier == NGX_HTTP_IDEMPOTENCY_TIER_NONE) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = ngx_http_idempotency_tier_names[ctx->tier].len;
    v->data = ngx_http_idempotency_tier_names[ctx->tier].data;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


/* the context of a request that won its claim (it is forwarded) */

static ngx_http_idempotency_ctx_t *
ngx_http_idempotency_claimed(ngx_http_request_t *r)
{
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_get_ctx(r->main);

    if (ctx == NULL || ctx->epoch == 0
        || ctx->outcome != NGX_HTTP_IDEMPOTENCY_OUT_FORWARD
        || (ctx->status != NGX_HTTP_IDEMPOTENCY_NEW
            && ctx->status != NGX_HTTP_IDEMPOTENCY_TAKEOVER
            && ctx->status != NGX_HTTP_IDEMPOTENCY_FIND
            && ctx->status != NGX_HTTP_IDEMPOTENCY_REDRIVE))
    {
        return NULL;
    }

    return ctx;
}


/*
 * The claim's epoch; (data 1) the key's row in the store as 64 hex
 * digits; (data 2) with the epoch, what the backend's fence marker names:
 * the key's life (fence.c)
 */

static ngx_int_t
ngx_http_idempotency_epoch_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                      *p;
    u_char                       marker[NGX_HTTP_IDEMPOTENCY_HASH_LEN];
    ngx_http_idempotency_ctx_t  *ctx;

    ctx = ngx_http_idempotency_claimed(r);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, data ? 2 * NGX_HTTP_IDEMPOTENCY_HASH_LEN
                                  : NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    if (data == 2
        && ngx_http_idempotency_marker_hash(ctx->key_hash,
                                            ctx->has_life ? ctx->life : NULL,
                                            marker)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    v->len = (data ? ngx_hex_dump(p, data == 2 ? marker : ctx->key_hash,
                                  NGX_HTTP_IDEMPOTENCY_HASH_LEN)
                   : ngx_sprintf(p, "%ui", ctx->epoch))
             - p;
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;

    return NGX_OK;
}


static void *
ngx_http_idempotency_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idempotency_main_conf_t));
    if (imcf == NULL) {
        return NULL;
    }

    if (ngx_array_init(&imcf->stores, cf->pool, 2,
                       sizeof(ngx_http_idempotency_store_t *))
        != NGX_OK
        || ngx_array_init(&imcf->locations, cf->pool, 4, sizeof(void **))
           != NGX_OK)
    {
        return NULL;
    }

    imcf->capture_memory = NGX_CONF_UNSET_SIZE;
    imcf->max_held = NGX_CONF_UNSET_UINT;

    return imcf;
}


static char *
ngx_http_idempotency_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_idempotency_main_conf_t  *imcf = conf;

    ngx_conf_init_size_value(imcf->capture_memory, 128 * 1024 * 1024);
    ngx_conf_init_uint_value(imcf->max_held, 1024);

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_check_capture_memory(ngx_conf_t *cf, void *post,
    void *data)
{
    size_t  *sp = data;

    if (*sp < 64 * 1024) {
        return "must be at least 64k";
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_idempotency_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_idempotency_loc_conf_t  *conf;

    conf = ngx_pcalloc(cf->pool, sizeof(ngx_http_idempotency_loc_conf_t));
    if (conf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     conf->methods = 0;
     *     conf->header = { 0, NULL };
     *     conf->scope = NULL;
     */

    conf->store = NGX_CONF_UNSET_PTR;
    conf->keysrc = NGX_CONF_UNSET_PTR;
    conf->signer = NGX_CONF_UNSET_PTR;
    conf->required = NGX_CONF_UNSET;
    conf->fingerprint = NGX_CONF_UNSET;
    conf->ttl = NGX_CONF_UNSET;
    conf->lease = NGX_CONF_UNSET_MSEC;
    conf->wait = NGX_CONF_UNSET_MSEC;
    conf->store_5xx = NGX_CONF_UNSET;
    conf->max_response_size = NGX_CONF_UNSET_SIZE;
    conf->on_store_error = NGX_CONF_UNSET_UINT;
    conf->on_unknown = NGX_CONF_UNSET_UINT;
    conf->skip_headers = NGX_CONF_UNSET_PTR;
    conf->max_attempts = NGX_CONF_UNSET_UINT;
    conf->fence = NGX_CONF_UNSET_PTR;
    conf->fence_find = NGX_CONF_UNSET;
    conf->keys = NGX_CONF_UNSET_UINT;
    conf->issuer_ttl = NGX_CONF_UNSET;

    return conf;
}


static char *
ngx_http_idempotency_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child)
{
    ngx_http_idempotency_loc_conf_t  *prev = parent;
    ngx_http_idempotency_loc_conf_t  *conf = child;

    ngx_conf_merge_ptr_value(conf->store, prev->store, NULL);

    /* an "if" block inside an idempotency_admin location answers too */
    if (conf->admin == NULL) {
        conf->admin = prev->admin;
    }

    if (conf->methods == 0) {
        conf->methods = prev->methods ? prev->methods
                                      : (NGX_HTTP_POST|NGX_HTTP_PATCH);
    }

    ngx_conf_merge_str_value(conf->header, prev->header, "Idempotency-Key");
    ngx_conf_merge_ptr_value(conf->keysrc, prev->keysrc, NULL);
    ngx_conf_merge_ptr_value(conf->signer, prev->signer, NULL);
    ngx_conf_merge_value(conf->required, prev->required, 0);

    if (conf->scope == NULL) {
        conf->scope = prev->scope;
    }

    ngx_conf_merge_value(conf->fingerprint, prev->fingerprint, 1);
    ngx_conf_merge_value(conf->ttl, prev->ttl, 86400);
    ngx_conf_merge_msec_value(conf->lease, prev->lease, 30000);
    ngx_conf_merge_msec_value(conf->wait, prev->wait, 0);
    ngx_conf_merge_value(conf->store_5xx, prev->store_5xx, 0);

    if (ngx_http_idempotency_merge_keep(cf, conf, prev) != NGX_OK) {
        return NGX_CONF_ERROR;
    }
    ngx_conf_merge_size_value(conf->max_response_size,
                              prev->max_response_size, 1024 * 1024);
    ngx_conf_merge_uint_value(conf->on_store_error, prev->on_store_error,
                              NGX_HTTP_IDEMPOTENCY_STORE_REJECT);
    ngx_conf_merge_uint_value(conf->on_unknown, prev->on_unknown,
                              NGX_HTTP_IDEMPOTENCY_UNKNOWN_KEEP);
    ngx_conf_merge_str_value(conf->epoch_header, prev->epoch_header, "");
    ngx_conf_merge_str_value(conf->attempt_header, prev->attempt_header,
                             "Idempotency-Attempt");
    ngx_conf_merge_uint_value(conf->max_attempts, prev->max_attempts, 10);
    ngx_conf_merge_ptr_value(conf->skip_headers, prev->skip_headers, NULL);

    if (conf->fence == NGX_CONF_UNSET_PTR) {
        conf->fence_table = prev->fence_table;
        conf->fence_find = prev->fence_find;
    }

    ngx_conf_merge_ptr_value(conf->fence, prev->fence, NULL);
    ngx_conf_merge_value(conf->fence_find, prev->fence_find, 1);
    ngx_conf_merge_uint_value(conf->keys, prev->keys,
                              NGX_HTTP_IDEMPOTENCY_KEYS_ANY);

    if (conf->issuer_ttl != NGX_CONF_UNSET
        || conf->keys == NGX_HTTP_IDEMPOTENCY_KEYS_ISSUED)
    {
        if (conf->store == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"%s\" needs \"idempotency\" with a store",
                               conf->issuer_ttl != NGX_CONF_UNSET
                               ? "idempotency_key_issuer"
                               : "idempotency_keys issued");
            return NGX_CONF_ERROR;
        }

        /* checked in postconfiguration: the store may come later */
        conf->store->needs_secret = 1;
    }

    if (conf->keys == NGX_HTTP_IDEMPOTENCY_KEYS_ISSUED && conf->keysrc) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idempotency_keys issued\" checks the key "
                           "header: it cannot be used with "
                           "\"idempotency_key\"'s sources");
        return NGX_CONF_ERROR;
    }

    if (conf->store == NULL) {
        return NGX_CONF_OK;
    }

    if (conf->fence) {
        if (ngx_http_idempotency_check_fence(cf, conf) != NGX_OK) {
            return NGX_CONF_ERROR;
        }

        /* its keys name their lives in the markers (sql.c, fence.c) */
        conf->store->life = 1;
    }

    if ((ngx_msec_t) conf->ttl * 1000 <= conf->lease) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idempotency_lease\" (%Mms) must be shorter "
                           "than \"idempotency_ttl\" (%Ts)",
                           conf->lease, conf->ttl);
        return NGX_CONF_ERROR;
    }

    /* checked against the store's query_timeout in postconfiguration:
     * the store may be defined after this location */

    if (conf->lease < conf->store->min_lease || conf->store->min_lease == 0)
    {
        conf->store->min_lease = conf->lease;
    }

    if (ngx_http_idempotency_protect(cf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * What would void the fence.  A backend refuses an epoch that was fenced
 * with a 5xx: stored, that refusal would be the key's answer, and the
 * operation would never run.
 */

static ngx_int_t
ngx_http_idempotency_check_fence(ngx_conf_t *cf,
    ngx_http_idempotency_loc_conf_t *conf)
{
    ngx_uint_t  s;

    for (s = 500; s < 600; s++) {
        if (ngx_http_idempotency_kept(conf, s)) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "\"idempotency_fence\" cannot keep a 5xx "
                               "(%ui, \"idempotency_store_status\" or "
                               "\"idempotency_store_5xx\"): a backend refuses "
                               "a fenced epoch with a 5xx, which would be "
                               "stored as the key's answer", s);
            return NGX_ERROR;
        }
    }

    if (conf->on_unknown == NGX_HTTP_IDEMPOTENCY_UNKNOWN_REDRIVE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idempotency_on_unknown_outcome redrive\" is "
                           "for a backend that deduplicates by itself, not "
                           "with \"idempotency_fence\": the marker decides "
                           "(and finds the answer)");
        return NGX_ERROR;
    }

    if (conf->on_unknown == NGX_HTTP_IDEMPOTENCY_UNKNOWN_RELEASE) {
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                           "\"idempotency_on_unknown_outcome release\" "
                           "changes nothing with \"idempotency_fence\": a "
                           "retry after an unknown outcome waits for the "
                           "marker's verdict either way");
    }

    return NGX_OK;
}


/*
 * A lease must outlive a failed renewal and a successful one: renewals
 * start every lease / 3 and each may take query_timeout.
 */

static ngx_int_t
ngx_http_idempotency_check_lease(ngx_log_t *log,
    ngx_http_idempotency_store_t *store, ngx_msec_t lease)
{
    if (store->query_timeout == 0 || lease >= 3 * store->query_timeout) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_EMERG, log, 0,
                  "\"idempotency_lease\" (%Mms) must be at least three "
                  "times the query_timeout of idempotency store \"%V\" "
                  "(%Mms): a lease renewal could not fail once and still "
                  "keep the key", lease, &store->name, store->query_timeout);

    return NGX_ERROR;
}


/* the upstream modules; each location configuration of theirs starts
 * with its ngx_http_upstream_conf_t */

static const char  *ngx_http_idempotency_upstreams[][2] = {
    { "ngx_http_proxy_module", "proxy" },
    { "ngx_http_fastcgi_module", "fastcgi" },
    { "ngx_http_uwsgi_module", "uwsgi" },
    { "ngx_http_scgi_module", "scgi" },
    { "ngx_http_grpc_module", "grpc" },
    { "ngx_http_memcached_module", "memcached" }
};


/*
 * The upstream module configuration m of a location, or NULL; n: its
 * prefix in ngx_http_idempotency_upstreams
 */

static ngx_http_upstream_conf_t *
ngx_http_idempotency_upstream_conf(ngx_cycle_t *cycle, void **loc_conf,
    ngx_uint_t m, ngx_uint_t *n)
{
    ngx_uint_t     i;
    ngx_module_t  *module;

    module = cycle->modules[m];

    if (module->type != NGX_HTTP_MODULE) {
        return NULL;
    }

    for (i = 0; i < sizeof(ngx_http_idempotency_upstreams)
                    / sizeof(ngx_http_idempotency_upstreams[0]); i++)
    {
        if (ngx_strcmp(module->name, ngx_http_idempotency_upstreams[i][0])
            == 0)
        {
            *n = i;
            return loc_conf[module->ctx_index];
        }
    }

    return NULL;
}


/*
 * Once a protected request is forwarded, its upstream exchange must run
 * to its end even when the client goes away: the backend has executed,
 * and the retry that is sure to come must get this response.  nginx's
 * upstream modules cut the upstream off when the client closes, unless
 * their *_ignore_client_abort is on: it is turned on for every location
 * that has a store (and, for a request an internal redirect takes
 * elsewhere, by filter.c's guard).  The location is remembered for the
 * check of *_next_upstream once every location is merged.
 */

static ngx_int_t
ngx_http_idempotency_protect(ngx_conf_t *cf)
{
    void                            ***loc;
    ngx_uint_t                         i, n;
    ngx_http_conf_ctx_t               *ctx;
    ngx_http_upstream_conf_t          *ucf;
    ngx_http_idempotency_main_conf_t  *imcf;

    ctx = cf->ctx;

    for (i = 0; cf->cycle->modules[i]; i++) {
        ucf = ngx_http_idempotency_upstream_conf(cf->cycle, ctx->loc_conf, i,
                                                 &n);
        if (ucf) {
            ucf->ignore_client_abort = 1;
        }
    }

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idempotency_module);

    loc = ngx_array_push(&imcf->locations);
    if (loc == NULL) {
        return NGX_ERROR;
    }

    *loc = ctx->loc_conf;

    return NGX_OK;
}


/*
 * "*_next_upstream ... non_idempotent" lets nginx send a request that was
 * sent already to another upstream: the claimed request would run twice.
 */

static void
ngx_http_idempotency_check_resend(ngx_conf_t *cf)
{
    void                            ***loc;
    ngx_uint_t                         i, m, n;
    ngx_http_upstream_conf_t          *ucf;
    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idempotency_module);
    loc = imcf->locations.elts;

    for (i = 0; i < imcf->locations.nelts; i++) {
        clcf = loc[i][ngx_http_core_module.ctx_index];

        for (m = 0; cf->cycle->modules[m]; m++) {
            ucf = ngx_http_idempotency_upstream_conf(cf->cycle, loc[i], m,
                                                     &n);

            if (ucf == NULL
                || !(ucf->next_upstream & NGX_HTTP_UPSTREAM_FT_NON_IDEMPOTENT))
            {
                continue;
            }

            ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                          "idempotency: \"%s_next_upstream ... "
                          "non_idempotent\" in location \"%V\" lets nginx "
                          "send a request it has sent already to another "
                          "upstream: a claimed request can run twice",
                          ngx_http_idempotency_upstreams[n][1], &clcf->name);
        }
    }
}


static ngx_int_t
ngx_http_idempotency_init(ngx_conf_t *cf)
{
    ngx_uint_t                          i;
    ngx_http_handler_pt                *h;
    ngx_http_core_main_conf_t          *cmcf;
    ngx_http_idempotency_store_t      **stores;
    ngx_http_idempotency_main_conf_t   *imcf;

    if (ngx_http_idempotency_problem_check(cf->log) != NGX_OK) {
        return NGX_ERROR;
    }

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idempotency_module);

    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {
        if (!stores[i]->defined) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "idempotency store \"%V\" is not defined "
                          "(no \"idempotency_store %V ...\") in %s:%ui",
                          &stores[i]->name, &stores[i]->name,
                          stores[i]->conf_file, stores[i]->conf_line);
            return NGX_ERROR;
        }

        if (stores[i]->needs_secret && stores[i]->secrets == NULL) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "idempotency store \"%V\" needs \"secret=\" or "
                          "\"secret_file=\": a location issues or checks "
                          "keys with it", &stores[i]->name);
            return NGX_ERROR;
        }

        if (stores[i]->min_lease
            && ngx_http_idempotency_check_lease(cf->log, stores[i],
                                                stores[i]->min_lease)
               != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_idempotency_handler;

    ngx_http_idempotency_check_resend(cf);
    ngx_http_idempotency_outcome_init(cf);

    if (ngx_http_idempotency_resend_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_idempotency_metrics_init(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_idempotency_filter_init(cf);
}


static ngx_int_t
ngx_http_idempotency_init_process(ngx_cycle_t *cycle)
{
    if (ngx_http_idempotency_metrics_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_idempotency_purge_init(cycle);
}


static void
ngx_http_idempotency_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_idempotency_redis_exit(cycle);
    ngx_http_idempotency_mysql_exit(cycle);
    ngx_http_idempotency_complete_exit(cycle);
    ngx_http_idempotency_key_exit();
}
