
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: the "idempotency_store" directive.
 *
 * Its parameters are "name=value" words, each parsed by the setter of
 * its entry in ngx_http_idempotency_store_params, with bounds there as
 * nginx's own slots have them; what depends on several parameters is
 * checked once the line is read.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <sys/un.h>

#include "ngx_http_idempotency_store.h"
#include "ngx_http_idempotency_cache.h"
#include "ngx_http_idempotency_entry.h"
#include "ngx_http_idempotency_purge.h"


typedef struct ngx_http_idempotency_store_param_s
    ngx_http_idempotency_store_param_t;

/*
 * NGX_CONF_OK; NGX_CONF_ERROR when the setter logged why; or
 * ngx_http_idempotency_invalid for "invalid parameter" (which names the
 * value only if it is not a secret)
 */
typedef char *(*ngx_http_idempotency_store_param_pt)(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);

struct ngx_http_idempotency_store_param_s {
    ngx_str_t                            name;
    ngx_http_idempotency_store_param_pt  set;
    size_t                               offset;  /* in the store */

    /* the bounds of a number; for a string, low is its least length */
    ngx_int_t                            low;
    ngx_int_t                            high;

    ngx_uint_t                           secret;  /* never echo the value */
};


/* a server address, as "mysql=" and "redis=" give it */
typedef struct {
    ngx_str_t                       name;
    ngx_str_t                       host;     /* IP literal, NUL-ended */
    in_port_t                       port;
    ngx_str_t                       socket;   /* unix path, NUL-ended */
} ngx_http_idempotency_addr_t;


static char *ngx_http_idempotency_param_mysql(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_redis(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_str(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_secret_file(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_table(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_num(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_msec(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_size(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_purge(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_ssl(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_ssl_file(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_secret(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_secret_key_file(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);
static char *ngx_http_idempotency_param_cache(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param);

static char *ngx_http_idempotency_store_check(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store);
static ngx_int_t ngx_http_idempotency_add_secret(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *secret);
static ngx_int_t ngx_http_idempotency_parse_server(ngx_conf_t *cf,
    ngx_http_idempotency_store_param_t *param, ngx_str_t *value,
    in_port_t default_port, ngx_uint_t ipv4_only,
    ngx_http_idempotency_addr_t *addr);
static ngx_int_t ngx_http_idempotency_cstr(ngx_pool_t *pool, ngx_str_t *s);


#define ngx_http_idempotency_field(store, param, type)                       \
    ((type *) ((u_char *) (store) + (param)->offset))

#define NGX_HTTP_IDEMPOTENCY_NO_LIMIT  NGX_MAX_INT_T_VALUE


static char  ngx_http_idempotency_invalid[] = "invalid";


static ngx_http_idempotency_store_param_t
    ngx_http_idempotency_store_params[] = {

    { ngx_string("mysql"), ngx_http_idempotency_param_mysql, 0, 0, 0, 0 },

    { ngx_string("user"), ngx_http_idempotency_param_str,
      offsetof(ngx_http_idempotency_store_t, user), 0, 0, 0 },

    { ngx_string("password"), ngx_http_idempotency_param_str,
      offsetof(ngx_http_idempotency_store_t, password), 0, 0, 1 },

    /* secrets from files, so that "nginx -T" does not print them */

    { ngx_string("password_file"), ngx_http_idempotency_param_secret_file,
      offsetof(ngx_http_idempotency_store_t, password), 0, 0, 0 },

    { ngx_string("database"), ngx_http_idempotency_param_str,
      offsetof(ngx_http_idempotency_store_t, database), 0, 0, 0 },

    { ngx_string("table"), ngx_http_idempotency_param_table,
      offsetof(ngx_http_idempotency_store_t, table), 1, 64, 0 },

    { ngx_string("pool"), ngx_http_idempotency_param_num,
      offsetof(ngx_http_idempotency_store_t, conns_max), 1, 65535, 0 },

    { ngx_string("wait_queue"), ngx_http_idempotency_param_num,
      offsetof(ngx_http_idempotency_store_t, wait_queue), 0, 65535, 0 },

    { ngx_string("connect_timeout"), ngx_http_idempotency_param_msec,
      offsetof(ngx_http_idempotency_store_t, connect_timeout), 1,
      NGX_HTTP_IDEMPOTENCY_NO_LIMIT, 0 },

    { ngx_string("query_timeout"), ngx_http_idempotency_param_msec,
      offsetof(ngx_http_idempotency_store_t, query_timeout), 1,
      NGX_HTTP_IDEMPOTENCY_NO_LIMIT, 0 },

    { ngx_string("purge"), ngx_http_idempotency_param_purge,
      offsetof(ngx_http_idempotency_store_t, purge), 1000,
      NGX_HTTP_IDEMPOTENCY_NO_LIMIT, 0 },

    { ngx_string("purge_batch"), ngx_http_idempotency_param_num,
      offsetof(ngx_http_idempotency_store_t, purge_batch), 1, 100000, 0 },

    { ngx_string("ssl"), ngx_http_idempotency_param_ssl, 0, 0, 0, 0 },

    { ngx_string("ssl_ca"), ngx_http_idempotency_param_ssl_file,
      offsetof(ngx_http_idempotency_store_t, ssl_ca), 0, 0, 0 },

    { ngx_string("ssl_cert"), ngx_http_idempotency_param_ssl_file,
      offsetof(ngx_http_idempotency_store_t, ssl_cert), 0, 0, 0 },

    { ngx_string("ssl_key"), ngx_http_idempotency_param_ssl_file,
      offsetof(ngx_http_idempotency_store_t, ssl_key), 0, 0, 0 },

    { ngx_string("redis"), ngx_http_idempotency_param_redis, 0, 0, 0, 0 },

    { ngx_string("redis_password"), ngx_http_idempotency_param_str,
      offsetof(ngx_http_idempotency_store_t, redis_password), 1, 0, 1 },

    { ngx_string("redis_password_file"), ngx_http_idempotency_param_secret_file,
      offsetof(ngx_http_idempotency_store_t, redis_password), 0, 0, 0 },

    { ngx_string("redis_db"), ngx_http_idempotency_param_num,
      offsetof(ngx_http_idempotency_store_t, redis_db), 0, 65535, 0 },

    { ngx_string("redis_timeout"), ngx_http_idempotency_param_msec,
      offsetof(ngx_http_idempotency_store_t, redis_timeout), 1,
      NGX_HTTP_IDEMPOTENCY_NO_LIMIT, 0 },

    { ngx_string("redis_max_entry"), ngx_http_idempotency_param_size,
      offsetof(ngx_http_idempotency_store_t, redis_max_entry), 1024,
      512 * 1024 * 1024, 0 },

    /* the first secret signs, the others are still accepted */

    { ngx_string("secret"), ngx_http_idempotency_param_secret, 0, 0, 0, 1 },

    { ngx_string("secret_file"), ngx_http_idempotency_param_secret_key_file,
      0, 0, 0, 0 },

    { ngx_string("cache"), ngx_http_idempotency_param_cache, 0, 0, 0, 0 },

    { ngx_null_string, NULL, 0, 0, 0, 0 }
};


char *
ngx_http_idempotency_store_block(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    u_char                              *p;
    char                                *rv;
    ngx_str_t                           *value, name, v;
    ngx_uint_t                           i;
    ngx_http_idempotency_store_t        *store;
    ngx_http_idempotency_store_param_t  *param;

    value = cf->args->elts;

    store = ngx_http_idempotency_find_store(cf, &value[1]);
    if (store == NULL) {
        return NGX_CONF_ERROR;
    }

    if (store->defined) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" is already defined",
                           &value[1]);
        return NGX_CONF_ERROR;
    }

    store->defined = 1;

    for (i = 2; i < cf->args->nelts; i++) {

        p = ngx_strlchr(value[i].data, value[i].data + value[i].len, '=');

        if (p == NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\" in "
                               "\"idempotency_store\"", &value[i]);
            return NGX_CONF_ERROR;
        }

        name.data = value[i].data;
        name.len = p - value[i].data;
        v.data = p + 1;
        v.len = value[i].data + value[i].len - v.data;

        for (param = ngx_http_idempotency_store_params;
             param->name.len;
             param++)
        {
            if (param->name.len == name.len
                && ngx_strncmp(param->name.data, name.data, name.len) == 0)
            {
                break;
            }
        }

        if (param->name.len == 0) {

            /* by its name only: the value may be a secret under a
             * mistyped name */

            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "unknown parameter \"%V\" in "
                               "\"idempotency_store\"", &name);
            return NGX_CONF_ERROR;
        }

        rv = param->set(cf, store, &v, param);

        if (rv == NGX_CONF_OK) {
            continue;
        }

        if (rv == ngx_http_idempotency_invalid) {
            if (param->secret) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid \"%V=\" parameter in "
                                   "\"idempotency_store\"", &name);

            } else {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "invalid parameter \"%V\" in "
                                   "\"idempotency_store\"", &value[i]);
            }
        }

        return NGX_CONF_ERROR;
    }

    return ngx_http_idempotency_store_check(cf, store);
}


/* what depends on several parameters, and the defaults that do */

static char *
ngx_http_idempotency_store_check(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store)
{
    if (store->redis_name.len == 0
        && (store->redis_password.len || store->redis_db
            || store->redis_timeout != NGX_CONF_UNSET_MSEC
            || store->redis_max_entry != NGX_CONF_UNSET_SIZE))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" has \"redis_...\" "
                           "parameters but no \"redis=\" server",
                           &store->name);
        return NGX_CONF_ERROR;
    }

    ngx_conf_init_msec_value(store->redis_timeout, 500);
    ngx_conf_init_size_value(store->redis_max_entry, 4 * 1024 * 1024);

    /* whoever can write to the Redis must not choose what is replayed */

    if (store->redis_name.len && store->secrets == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" has \"redis=\" but no "
                           "\"secret=\" or \"secret_file=\" to sign its "
                           "entries with", &store->name);
        return NGX_CONF_ERROR;
    }

    if (store->shards.nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" has no \"mysql=\" "
                           "server", &store->name);
        return NGX_CONF_ERROR;
    }

    if (store->user.len == 0 || store->database.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" needs \"user=\" and "
                           "\"database=\"", &store->name);
        return NGX_CONF_ERROR;
    }

    if (store->ssl == NGX_HTTP_IDEMPOTENCY_SSL_OFF
        && (store->ssl_ca.len || store->ssl_cert.len || store->ssl_key.len))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" has \"ssl_...\" "
                           "parameters but \"ssl=\" is off", &store->name);
        return NGX_CONF_ERROR;
    }

    if (store->ssl == NGX_HTTP_IDEMPOTENCY_SSL_VERIFY
        && store->ssl_ca.len == 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" has \"ssl=verify\" "
                           "but no \"ssl_ca=\" to verify the server's "
                           "certificate with", &store->name);
        return NGX_CONF_ERROR;
    }

    if ((store->ssl_cert.len == 0) != (store->ssl_key.len == 0)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\" needs both "
                           "\"ssl_cert=\" and \"ssl_key=\", or neither",
                           &store->name);
        return NGX_CONF_ERROR;
    }

    /* the client library wants C strings */

    if (ngx_http_idempotency_cstr(cf->pool, &store->user) != NGX_OK
        || ngx_http_idempotency_cstr(cf->pool, &store->password) != NGX_OK
        || ngx_http_idempotency_cstr(cf->pool, &store->database) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


ngx_http_idempotency_store_t *
ngx_http_idempotency_find_store(ngx_conf_t *cf, ngx_str_t *name)
{
    ngx_uint_t                         i;
    ngx_http_idempotency_store_t     **stores, *store;
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_idempotency_module);

    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {
        if (stores[i]->name.len == name->len
            && ngx_strncmp(stores[i]->name.data, name->data, name->len) == 0)
        {
            return stores[i];
        }
    }

    store = ngx_pcalloc(cf->pool, sizeof(ngx_http_idempotency_store_t));
    if (store == NULL) {
        return NULL;
    }

    if (ngx_array_init(&store->shards, cf->pool, 2,
                       sizeof(ngx_http_idempotency_shard_t))
        != NGX_OK)
    {
        return NULL;
    }

    store->name = *name;
    ngx_str_set(&store->table, "idempotency_keys");
    store->conns_max = 16;
    store->wait_queue = 256;
    store->connect_timeout = 1000;
    store->query_timeout = 2000;
    store->purge = NGX_HTTP_IDEMPOTENCY_PURGE_INTERVAL;
    store->purge_batch = NGX_HTTP_IDEMPOTENCY_PURGE_BATCH;
    store->redis_timeout = NGX_CONF_UNSET_MSEC;
    store->redis_max_entry = NGX_CONF_UNSET_SIZE;
    store->conf_file = cf->conf_file->file.name.data;
    store->conf_line = cf->conf_file->line;

    stores = ngx_array_push(&imcf->stores);
    if (stores == NULL) {
        return NULL;
    }

    *stores = store;

    return store;
}


/* ---------------------------------------------------------- setters */


/* mysql=ADDR, one per shard */

static char *
ngx_http_idempotency_param_mysql(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_http_idempotency_addr_t    addr;
    ngx_http_idempotency_shard_t  *shard;

    if (ngx_http_idempotency_parse_server(cf, param, value, 3306, 0, &addr)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    shard = ngx_array_push(&store->shards);
    if (shard == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(shard, sizeof(ngx_http_idempotency_shard_t));

    shard->index = store->shards.nelts - 1;
    shard->store = store;
    shard->name = addr.name;
    shard->host = addr.host;
    shard->port = addr.port;
    shard->socket = addr.socket;

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_param_redis(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_http_idempotency_addr_t  addr;

    if (store->redis_name.len) {
        return ngx_http_idempotency_invalid;
    }

    if (ngx_http_idempotency_parse_server(cf, param, value, 6379, 1, &addr)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    store->redis_name = addr.name;
    store->redis_host = addr.host;
    store->redis_port = addr.port;
    store->redis_socket = addr.socket;

    return NGX_CONF_OK;
}


/* a string of at least "low" bytes */

static char *
ngx_http_idempotency_param_str(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    if (value->len < (size_t) param->low) {
        return ngx_http_idempotency_invalid;
    }

    *ngx_http_idempotency_field(store, param, ngx_str_t) = *value;

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_param_secret_file(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    if (ngx_http_idempotency_read_secret(cf, value,
                            ngx_http_idempotency_field(store, param, ngx_str_t))
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* a table name goes into SQL text: [A-Za-z0-9_] only */

static char *
ngx_http_idempotency_param_table(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    u_char  c, *p;

    if (value->len < (size_t) param->low || value->len > (size_t) param->high)
    {
        return ngx_http_idempotency_invalid;
    }

    for (p = value->data; p < value->data + value->len; p++) {
        c = (u_char) (*p | 0x20);

        if (!((*p >= '0' && *p <= '9') || (c >= 'a' && c <= 'z')
              || *p == '_'))
        {
            return ngx_http_idempotency_invalid;
        }
    }

    *ngx_http_idempotency_field(store, param, ngx_str_t) = *value;

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_param_num(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_int_t  n;

    n = ngx_atoi(value->data, value->len);

    if (n == NGX_ERROR || n < param->low || n > param->high) {
        return ngx_http_idempotency_invalid;
    }

    *ngx_http_idempotency_field(store, param, ngx_uint_t) = n;

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_param_msec(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_int_t  n;

    n = ngx_parse_time(value, 0);

    if (n == NGX_ERROR || n < param->low || n > param->high) {
        return ngx_http_idempotency_invalid;
    }

    *ngx_http_idempotency_field(store, param, ngx_msec_t) = n;

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_param_size(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ssize_t  n;

    n = ngx_parse_size(value);

    if (n == NGX_ERROR || n < param->low || n > param->high) {
        return ngx_http_idempotency_invalid;
    }

    *ngx_http_idempotency_field(store, param, size_t) = n;

    return NGX_CONF_OK;
}


/* purge=TIME or off */

static char *
ngx_http_idempotency_param_purge(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    if (value->len == 3 && ngx_strncmp(value->data, "off", 3) == 0) {
        store->purge = 0;
        return NGX_CONF_OK;
    }

    return ngx_http_idempotency_param_msec(cf, store, value, param);
}


static char *
ngx_http_idempotency_param_ssl(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_uint_t  i;

    static ngx_conf_enum_t  modes[] = {
        { ngx_string("off"), NGX_HTTP_IDEMPOTENCY_SSL_OFF },
        { ngx_string("on"), NGX_HTTP_IDEMPOTENCY_SSL_ON },
        { ngx_string("verify"), NGX_HTTP_IDEMPOTENCY_SSL_VERIFY },
        { ngx_null_string, 0 }
    };

    for (i = 0; modes[i].name.len; i++) {
        if (modes[i].name.len == value->len
            && ngx_strncmp(modes[i].name.data, value->data, value->len) == 0)
        {
            store->ssl = modes[i].value;
            return NGX_CONF_OK;
        }
    }

    return ngx_http_idempotency_invalid;
}


/*
 * A file of ssl_ca=, ssl_cert=, ssl_key=: opened here so that "nginx -t"
 * names one that is missing; the client library reads it in the workers.
 */

static char *
ngx_http_idempotency_param_ssl_file(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_fd_t          fd;
    ngx_str_t        *file;
    ngx_file_info_t   fi;

    if (value->len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid \"%V=\" parameter in "
                           "\"idempotency_store\"", &param->name);
        return NGX_CONF_ERROR;
    }

    file = ngx_http_idempotency_field(store, param, ngx_str_t);
    *file = *value;

    if (ngx_conf_full_name(cf->cycle, file, 1) != NGX_OK
        || ngx_http_idempotency_cstr(cf->pool, file) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    fd = ngx_open_file(file->data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);

    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "cannot open the \"%V=\" file \"%V\" of "
                           "\"idempotency_store\"", &param->name, file);
        return NGX_CONF_ERROR;
    }

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR || !ngx_is_file(&fi)) {
        ngx_close_file(fd);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "the \"%V=\" file \"%V\" of \"idempotency_store\" "
                           "is not a regular file", &param->name, file);
        return NGX_CONF_ERROR;
    }

    ngx_close_file(fd);

    return NGX_CONF_OK;
}


/* secret=S; secret_file=F, the first line of F */

static char *
ngx_http_idempotency_param_secret(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    return ngx_http_idempotency_add_secret(cf, store, value) == NGX_OK
           ? NGX_CONF_OK : NGX_CONF_ERROR;
}


static char *
ngx_http_idempotency_param_secret_key_file(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    ngx_str_t  secret;

    if (ngx_http_idempotency_read_secret(cf, value, &secret) != NGX_OK
        || ngx_http_idempotency_add_secret(cf, store, &secret) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_idempotency_param_cache(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *value,
    ngx_http_idempotency_store_param_t *param)
{
    if (store->cache) {
        return ngx_http_idempotency_invalid;
    }

    return ngx_http_idempotency_cache_add(cf, store, value);
}


/* ---------------------------------------------------------- helpers */


/*
 * IP:port, host:port or unix:/path.  A name is looked up here, once, at
 * configuration time: the client libraries' own lookups would block a
 * worker.  For Redis only IPv4: hiredis 0.14 resolves its address with
 * getaddrinfo() for IPv4 first, and for an IPv6 literal that is a name
 * lookup, which may block.
 */

static ngx_int_t
ngx_http_idempotency_parse_server(ngx_conf_t *cf,
    ngx_http_idempotency_store_param_t *param, ngx_str_t *value,
    in_port_t default_port, ngx_uint_t ipv4_only,
    ngx_http_idempotency_addr_t *addr)
{
    u_char      *p;
    ngx_url_t    u;
    ngx_uint_t   i;

    ngx_memzero(addr, sizeof(ngx_http_idempotency_addr_t));

    if (value->len >= 5 && ngx_strncmp(value->data, "unix:", 5) == 0) {
        addr->name = *value;
        addr->socket.data = value->data + 5;
        addr->socket.len = value->len - 5;

        /* the libraries would cut a longer path short without a word */

        if (addr->socket.len == 0
            || addr->socket.len
               >= sizeof(((struct sockaddr_un *) 0)->sun_path))
        {
            goto invalid;
        }

        return ngx_http_idempotency_cstr(cf->pool, &addr->socket);
    }

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = *value;
    u.default_port = default_port;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%s in \"%V=%V\" of \"idempotency_store\"",
                               u.err, &param->name, value);
            return NGX_ERROR;
        }

        goto invalid;
    }

    if (u.naddrs == 0 || u.uri.len) {
        goto invalid;
    }

    for (i = 0; ipv4_only && i < u.naddrs; i++) {
        if (u.addrs[i].sockaddr->sa_family == AF_INET) {
            break;
        }
    }

    if (i == u.naddrs) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V=%V\" of \"idempotency_store\" has no "
                           "IPv4 address; use IPv4 or a unix socket",
                           &param->name, value);
        return NGX_ERROR;
    }

    p = ngx_pnalloc(cf->pool, NGX_SOCKADDR_STRLEN + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    addr->host.data = p;
    addr->host.len = ngx_sock_ntop(u.addrs[i].sockaddr, u.addrs[i].socklen,
                                   p, NGX_SOCKADDR_STRLEN, 0);
    p[addr->host.len] = '\0';

    addr->port = ngx_inet_get_port(u.addrs[i].sockaddr);
    addr->name = u.addrs[i].name;

    return NGX_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid address \"%V=%V\" in \"idempotency_store\", "
                       "it must be IP:port, host:port or unix:/path",
                       &param->name, value);
    return NGX_ERROR;
}


/*
 * A secret of at least 16 bytes (a passphrase-sized minimum; HMAC itself
 * takes any length), keyed once for the whole configuration.
 */

static ngx_int_t
ngx_http_idempotency_add_secret(ngx_conf_t *cf,
    ngx_http_idempotency_store_t *store, ngx_str_t *secret)
{
    void  **key;

    if (secret->len < 16) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\": a secret must be at "
                           "least 16 bytes long", &store->name);
        return NGX_ERROR;
    }

    if (store->secrets == NULL) {
        store->secrets = ngx_array_create(cf->pool, 2, sizeof(void *));
        if (store->secrets == NULL) {
            return NGX_ERROR;
        }
    }

    key = ngx_array_push(store->secrets);
    if (key == NULL) {
        return NGX_ERROR;
    }

    *key = ngx_http_idempotency_entry_key(cf->pool, secret);

    if (*key == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "idempotency store \"%V\": HMAC-SHA256 is not "
                           "available from OpenSSL", &store->name);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The first line of a file, read once when the configuration is (a
 * blocking read, as nginx reads its own certificate keys).
 */

ngx_int_t
ngx_http_idempotency_read_secret(ngx_conf_t *cf, ngx_str_t *file,
    ngx_str_t *secret)
{
    u_char          *p, *last;
    ssize_t          n;
    ngx_fd_t         fd;
    ngx_str_t        name;
    ngx_file_info_t  fi;

    name = *file;

    if (name.len == 0 || ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
        goto failed;
    }

    fd = ngx_open_file(name.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           "cannot read a secret from \"%V\"", file);
        return NGX_ERROR;
    }

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR
        || ngx_file_size(&fi) > 4096)
    {
        ngx_close_file(fd);
        goto failed;
    }

    p = ngx_pnalloc(cf->pool, (size_t) ngx_file_size(&fi) + 1);
    if (p == NULL) {
        ngx_close_file(fd);
        return NGX_ERROR;
    }

    n = ngx_read_fd(fd, p, (size_t) ngx_file_size(&fi));
    ngx_close_file(fd);

    if (n < 0) {
        goto failed;
    }

    last = ngx_strlchr(p, p + n, LF);
    last = last ? last : p + n;

    if (last > p && last[-1] == CR) {
        last--;
    }

    if (last == p) {
        goto failed;
    }

    secret->data = p;
    secret->len = last - p;

    return NGX_OK;

failed:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "cannot read a secret from \"%V\" (the first line "
                       "of a readable file of at most 4096 bytes)", file);
    return NGX_ERROR;
}


static ngx_int_t
ngx_http_idempotency_cstr(ngx_pool_t *pool, ngx_str_t *s)
{
    u_char  *p;

    p = ngx_pnalloc(pool, s->len + 1);
    if (p == NULL) {
        return NGX_ERROR;
    }

    /* an absent parameter is { 0, NULL }: memcpy() may not see NULL */

    if (s->len) {
        ngx_memcpy(p, s->data, s->len);
    }

    p[s->len] = '\0';
    s->data = p;

    return NGX_OK;
}
