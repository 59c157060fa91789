
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: "idempotency_metrics;", the metrics in
 * Prometheus' text format.
 *
 * Counters are atomic increments in the zone.  Gauges are each worker's
 * own numbers (its pools, its leases, its held duplicates), published
 * into its slot once a second and by the worker that answers a scrape;
 * the scrape sums the slots of the current workers.  No label value is
 * anything a client chose: store and server names come from nginx.conf.
 */


#include "ngx_http_idempotency_prometheus.h"
#include "ngx_http_idempotency_metrics.h"
#include "ngx_http_idempotency_mysql.h"
#include "ngx_http_idempotency_redis.h"


#define NGX_HTTP_IDEMPOTENCY_METRICS_PUBLISH  1000
#define NGX_HTTP_IDEMPOTENCY_METRICS_BUF      65536
#define NGX_HTTP_IDEMPOTENCY_METRICS_LINE     1024


/* the output of a scrape, and what it is made of */
typedef struct {
    ngx_pool_t                     *pool;
    ngx_chain_t                    *out;
    ngx_chain_t                   **last;
    ngx_buf_t                      *b;
    ngx_uint_t                      error;

    ngx_http_idempotency_store_t  **stores;
    ngx_uint_t                      nstores;
    ngx_str_t                      *labels;     /* the stores' names */
    ngx_uint_t                      nworkers;   /* slots to read */
    ngx_atomic_uint_t              *in_progress;
    ngx_atomic_uint_t              *held;
    ngx_uint_t                     *redis_up;
} ngx_http_idempotency_mout_t;


/* a counter sample: consecutive rows of one name make one family */
typedef struct {
    const char                     *name;
    const char                     *help;
    const char                     *labels;   /* besides store= */
    size_t                          offset;   /* in the store's block */
} ngx_http_idempotency_counter_t;


static void ngx_http_idempotency_metrics_timer(ngx_event_t *ev);
static void ngx_http_idempotency_metrics_publish(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_idempotency_metrics_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_idempotency_metrics_prepare(
    ngx_http_idempotency_mout_t *mo, ngx_http_request_t *r);
static void ngx_http_idempotency_metrics_write(
    ngx_http_idempotency_mout_t *mo);
static void ngx_http_idempotency_metrics_ops(
    ngx_http_idempotency_mout_t *mo);
static void ngx_http_idempotency_metrics_cache(
    ngx_http_idempotency_mout_t *mo);
static ngx_int_t ngx_http_idempotency_metrics_zone(
    ngx_http_idempotency_mout_t *mo, ngx_uint_t i,
    ngx_http_idempotency_cache_stats_t *cs);
static void ngx_http_idempotency_metrics_gauges(
    ngx_http_idempotency_mout_t *mo);
static void ngx_http_idempotency_metrics_servers(
    ngx_http_idempotency_mout_t *mo);
static void ngx_http_idempotency_metrics_family(
    ngx_http_idempotency_mout_t *mo, const char *name, const char *type,
    const char *help);
static void ngx_http_idempotency_metrics_printf(
    ngx_http_idempotency_mout_t *mo, const char *fmt, ...);
static ngx_str_t *ngx_http_idempotency_metrics_label(ngx_pool_t *pool,
    ngx_str_t *value);


static ngx_event_t  ngx_http_idempotency_metrics_ev;

static const char  *ngx_http_idempotency_metrics_ops_names[] = {
    [NGX_HTTP_IDEMPOTENCY_OP_OTHER] = NULL,             /* not counted */
    [NGX_HTTP_IDEMPOTENCY_OP_CLAIM] = "claim",
    [NGX_HTTP_IDEMPOTENCY_OP_RENEW] = "renew",
    [NGX_HTTP_IDEMPOTENCY_OP_COMPLETE] = "complete",
    [NGX_HTTP_IDEMPOTENCY_OP_RELEASE] = "release",
    [NGX_HTTP_IDEMPOTENCY_OP_PURGE] = "purge",
    [NGX_HTTP_IDEMPOTENCY_OP_REDIS_GET] = "redis_get",
    [NGX_HTTP_IDEMPOTENCY_OP_REDIS_SET] = "redis_set",
    [NGX_HTTP_IDEMPOTENCY_OP_READ] = "read",
    [NGX_HTTP_IDEMPOTENCY_OP_TAKEOVER] = "takeover"
};

NGX_HTTP_IDEMPOTENCY_TABLE_CHECK(ngx_http_idempotency_metrics_ops_names,
                                 NGX_HTTP_IDEMPOTENCY_NOPS);

#define ngx_http_idempotency_tier_counter(field)                              \
    offsetof(ngx_http_idempotency_metrics_t, tiers)                           \
    + offsetof(ngx_http_idempotency_counters_t, field)

static ngx_http_idempotency_counter_t  ngx_http_idempotency_metrics_counters[]
    = {
    { "completion_retries_total",
      "Completion writes tried again after a store error.", "",
      offsetof(ngx_http_idempotency_metrics_t, completion_retries) },
    { "lease_losses_total",
      "Keys whose lease was lost while their request or completion held "
      "them (taken over by another request).", "",
      offsetof(ngx_http_idempotency_metrics_t, lease_losses) },
    { "unstored_total",
      "Keys recorded as executed but not stored (their retries get 410).",
      "", offsetof(ngx_http_idempotency_metrics_t, unstored) },
    { "purged_rows_total",
      "Expired rows deleted by the background purge.", "",
      offsetof(ngx_http_idempotency_metrics_t, purged_rows) },
    { "unknown_outcomes_total",
      "Keys recorded as of unknown outcome: forwarded, and no complete "
      "response came back (their retries get 502 outcome-unknown).", "",
      offsetof(ngx_http_idempotency_metrics_t, unknown) },
    { "operator_actions_total",
      "Changes made through idempotency_admin: keys released (a retry "
      "runs anew) and completed keys forgotten.", "action=\"release\"",
      offsetof(ngx_http_idempotency_metrics_t, operator_releases) },
    { "operator_actions_total", NULL, "action=\"forget\"",
      offsetof(ngx_http_idempotency_metrics_t, operator_forgets) },
    { "held_refused_total",
      "Duplicates answered 409 at once because idempotency_max_held "
      "duplicates were held.", "",
      offsetof(ngx_http_idempotency_metrics_t, held_refused) },

    { "tier_lookups_total",
      "Lookups in the replay tiers: hit, miss, error (Redis failed or "
      "down), rejected (a Redis value that was not the module's entry "
      "for the key; also counted as a miss).",
      "tier=\"shm\",result=\"hit\"",
      ngx_http_idempotency_tier_counter(shm_hits) },
    { "tier_lookups_total", NULL, "tier=\"shm\",result=\"miss\"",
      ngx_http_idempotency_tier_counter(shm_misses) },
    { "tier_lookups_total", NULL, "tier=\"redis\",result=\"hit\"",
      ngx_http_idempotency_tier_counter(redis_hits) },
    { "tier_lookups_total", NULL, "tier=\"redis\",result=\"miss\"",
      ngx_http_idempotency_tier_counter(redis_misses) },
    { "tier_lookups_total", NULL, "tier=\"redis\",result=\"error\"",
      ngx_http_idempotency_tier_counter(redis_errors) },
    { "tier_lookups_total", NULL, "tier=\"redis\",result=\"rejected\"",
      ngx_http_idempotency_tier_counter(redis_bad) },

    { "tier_writes_total",
      "Entries written to the replay tiers (Redis: SETs sent).",
      "tier=\"shm\"", ngx_http_idempotency_tier_counter(shm_stores) },
    { "tier_writes_total", NULL, "tier=\"redis\"",
      ngx_http_idempotency_tier_counter(redis_stores) },

    { "cache_removals_total",
      "Entries of the cache zone removed (evicted: live, to make room; "
      "expired: past retention) or not kept (skipped).",
      "reason=\"evicted\"", ngx_http_idempotency_tier_counter(shm_evictions) },
    { "cache_removals_total", NULL, "reason=\"expired\"",
      ngx_http_idempotency_tier_counter(shm_expired) },
    { "cache_removals_total", NULL, "reason=\"skipped\"",
      ngx_http_idempotency_tier_counter(shm_skipped) },

    { NULL, NULL, NULL, 0 }
};


ngx_int_t
ngx_http_idempotency_metrics_init_process(ngx_cycle_t *cycle)
{
    ngx_event_t                       *ev;
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_idempotency_module);

    if (imcf == NULL || imcf->stores.nelts == 0
        || (ngx_process != NGX_PROCESS_WORKER
            && ngx_process != NGX_PROCESS_SINGLE))
    {
        return NGX_OK;
    }

    ev = &ngx_http_idempotency_metrics_ev;

    ev->handler = ngx_http_idempotency_metrics_timer;
    ev->data = cycle;
    ev->log = cycle->log;
    ev->cancelable = 1;

    ngx_add_timer(ev, NGX_HTTP_IDEMPOTENCY_METRICS_PUBLISH);

    return NGX_OK;
}


static void
ngx_http_idempotency_metrics_timer(ngx_event_t *ev)
{
    if (ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    ngx_http_idempotency_metrics_publish(ev->data);

    ngx_add_timer(ev, NGX_HTTP_IDEMPOTENCY_METRICS_PUBLISH);
}


/* this worker's gauges, into its slots */

static void
ngx_http_idempotency_metrics_publish(ngx_cycle_t *cycle)
{
    ngx_uint_t                          i, j, w, n;
    ngx_http_idempotency_conns_slot_t   *ps;
    ngx_http_idempotency_store_t      **stores;
    ngx_http_idempotency_metrics_t     *m;
    ngx_http_idempotency_shard_t       *shards;
    ngx_http_idempotency_main_conf_t   *imcf;
    ngx_http_idempotency_worker_slot_t *ws;
    ngx_http_idempotency_conns_stats_t   st;

    imcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_idempotency_module);
    if (imcf == NULL) {
        return;
    }

    w = ngx_http_idempotency_metrics_slot();
    stores = imcf->stores.elts;

    for (i = 0; i < imcf->stores.nelts; i++) {
        m = stores[i]->metrics;

        if (m == NULL) {
            continue;
        }

        ws = &m->worker[w];
        ws->in_progress = stores[i]->in_progress;
        ws->held = stores[i]->held;
        ws->redis_up = ngx_http_idempotency_redis_up(stores[i]);
        ws->pid = ngx_pid;

        shards = stores[i]->shards.elts;
        n = stores[i]->shards.nelts;

        for (j = 0; j < n; j++) {
            ngx_http_idempotency_mysql_stats(&shards[j], &st);

            ps = &m->pools[j * NGX_HTTP_IDEMPOTENCY_MAX_WORKERS + w];
            ps->up = st.up;
            ps->idle = st.idle;
            ps->busy = st.busy;
            ps->queued = st.queued;
            ps->pid = ngx_pid;
        }
    }
}


char *
ngx_http_idempotency_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_idempotency_metrics_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_idempotency_metrics_handler(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_chain_t                  *cl;
    ngx_http_idempotency_mout_t   mo;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    /* what this worker knows now, rather than up to a second ago */

    ngx_http_idempotency_metrics_publish((ngx_cycle_t *) ngx_cycle);

    if (ngx_http_idempotency_metrics_prepare(&mo, r) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_idempotency_metrics_write(&mo);

    if (mo.error) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    ngx_str_set(&r->headers_out.content_type,
                "text/plain; version=0.0.4; charset=utf-8");
    r->headers_out.content_type_len = sizeof("text/plain") - 1;
    r->headers_out.content_length_n = 0;

    for (cl = mo.out; cl; cl = cl->next) {
        r->headers_out.content_length_n += cl->buf->last - cl->buf->pos;
    }

    if (mo.b) {
        mo.b->last_buf = (r == r->main) ? 1 : 0;
        mo.b->last_in_chain = 1;

    } else {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    return ngx_http_output_filter(r, mo.out);
}


static ngx_int_t
ngx_http_idempotency_metrics_prepare(ngx_http_idempotency_mout_t *mo,
    ngx_http_request_t *r)
{
    ngx_uint_t                         i;
    ngx_str_t                         *label;
    ngx_core_conf_t                   *ccf;
    ngx_http_idempotency_main_conf_t  *imcf;

    imcf = ngx_http_get_module_main_conf(r, ngx_http_idempotency_module);
    ccf = (ngx_core_conf_t *) ngx_get_conf(ngx_cycle->conf_ctx,
                                           ngx_core_module);

    ngx_memzero(mo, sizeof(ngx_http_idempotency_mout_t));

    mo->pool = r->pool;
    mo->last = &mo->out;
    mo->stores = imcf->stores.elts;
    mo->nstores = imcf->stores.nelts;

    /* the slots of this configuration's workers; more share the last */

    mo->nworkers = ngx_min((ngx_uint_t) ngx_max(ccf->worker_processes, 1),
                           NGX_HTTP_IDEMPOTENCY_MAX_WORKERS);

    mo->labels = ngx_palloc(r->pool, (mo->nstores + 1) * sizeof(ngx_str_t));
    mo->in_progress = ngx_palloc(r->pool,
                          (mo->nstores + 1) * sizeof(ngx_atomic_uint_t));
    mo->held = ngx_palloc(r->pool,
                          (mo->nstores + 1) * sizeof(ngx_atomic_uint_t));
    mo->redis_up = ngx_palloc(r->pool, (mo->nstores + 1) * sizeof(ngx_uint_t));

    if (mo->labels == NULL || mo->in_progress == NULL || mo->held == NULL
        || mo->redis_up == NULL)
    {
        return NGX_ERROR;
    }

    for (i = 0; i < mo->nstores; i++) {
        label = ngx_http_idempotency_metrics_label(r->pool,
                                                   &mo->stores[i]->name);
        if (label == NULL) {
            return NGX_ERROR;
        }

        mo->labels[i] = *label;
    }

    return NGX_OK;
}


static void
ngx_http_idempotency_metrics_write(ngx_http_idempotency_mout_t *mo)
{
    ngx_uint_t                       i, j;
    ngx_http_idempotency_metrics_t  *m;
    ngx_http_idempotency_counter_t  *c, *next, *s;

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_requests_total", "counter",
        "Requests with an idempotency key handled, by $idempotency_status "
        "(takeover: a key whose lease had ended, taken over and run "
        "again).");

    for (i = 0; i < mo->nstores; i++) {
        m = mo->stores[i]->metrics;

        for (j = 0; m && j < NGX_HTTP_IDEMPOTENCY_NSTATUSES; j++) {
            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_requests_total{store=\"%V\","
                "status=\"%V\"} %uA\n", &mo->labels[i],
                &ngx_http_idempotency_status_names[j], m->requests[j]);
        }
    }

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_replays_total", "counter",
        "Replays of stored responses, by the tier that had the response.");

    for (i = 0; i < mo->nstores; i++) {
        m = mo->stores[i]->metrics;

        for (j = 1; m && j < NGX_HTTP_IDEMPOTENCY_NTIERS; j++) {
            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_replays_total{store=\"%V\","
                "tier=\"%V\"} %uA\n", &mo->labels[i],
                &ngx_http_idempotency_tier_names[j], m->replays[j]);
        }
    }

    /* the plain counters, a family at a time */

    for (c = ngx_http_idempotency_metrics_counters; c->name; c = next) {
        ngx_http_idempotency_metrics_printf(mo,
            "# HELP nginx_idempotency_%s %s\n"
            "# TYPE nginx_idempotency_%s counter\n",
            c->name, c->help, c->name);

        for (next = c; next->name && ngx_strcmp(next->name, c->name) == 0;
             next++)
        { /* void */ }

        for (i = 0; i < mo->nstores; i++) {
            m = mo->stores[i]->metrics;

            for (s = c; m && s < next; s++) {
                ngx_http_idempotency_metrics_printf(mo,
                    "nginx_idempotency_%s{store=\"%V\"%s%s} %uA\n",
                    s->name, &mo->labels[i], s->labels[0] ? "," : "",
                    s->labels, *(ngx_atomic_t *) ((u_char *) m + s->offset));
            }
        }
    }

    ngx_http_idempotency_metrics_ops(mo);
    ngx_http_idempotency_metrics_cache(mo);
    ngx_http_idempotency_metrics_gauges(mo);
    ngx_http_idempotency_metrics_servers(mo);
}


/* store operations: counts by result, and a latency histogram */

static void
ngx_http_idempotency_metrics_ops(ngx_http_idempotency_mout_t *mo)
{
    ngx_uint_t                       i, k, b;
    ngx_atomic_uint_t                n;
    ngx_http_idempotency_metrics_t  *m;

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_store_operations_total", "counter",
        "Store operations by kind and result (error: an SQL or Redis "
        "error, a timeout, a full wait queue, the server down).");

    for (i = 0; i < mo->nstores; i++) {
        m = mo->stores[i]->metrics;

        for (k = 1; m && k < NGX_HTTP_IDEMPOTENCY_NOPS; k++) {
            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_store_operations_total{store=\"%V\","
                "operation=\"%s\",result=\"ok\"} %uA\n"
                "nginx_idempotency_store_operations_total{store=\"%V\","
                "operation=\"%s\",result=\"error\"} %uA\n",
                &mo->labels[i], ngx_http_idempotency_metrics_ops_names[k],
                m->ops[k][0], &mo->labels[i],
                ngx_http_idempotency_metrics_ops_names[k], m->ops[k][1]);
        }
    }

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_store_operation_duration_seconds", "histogram",
        "Time from an operation's start (its wait for a connection "
        "included) to its end, in the event loop's millisecond clock.");

    for (i = 0; i < mo->nstores; i++) {
        m = mo->stores[i]->metrics;

        for (k = 1; m && k < NGX_HTTP_IDEMPOTENCY_NOPS; k++) {
            n = 0;

            for (b = 0; b < NGX_HTTP_IDEMPOTENCY_NBUCKETS; b++) {
                n += m->op_buckets[k][b];

                if (b == NGX_HTTP_IDEMPOTENCY_NBUCKETS - 1) {
                    ngx_http_idempotency_metrics_printf(mo,
                        "nginx_idempotency_store_operation_duration_seconds"
                        "_bucket{store=\"%V\",operation=\"%s\","
                        "le=\"+Inf\"} %uA\n", &mo->labels[i],
                        ngx_http_idempotency_metrics_ops_names[k], n);
                    break;
                }

                ngx_http_idempotency_metrics_printf(mo,
                    "nginx_idempotency_store_operation_duration_seconds"
                    "_bucket{store=\"%V\",operation=\"%s\","
                    "le=\"%M.%03M\"} %uA\n", &mo->labels[i],
                    ngx_http_idempotency_metrics_ops_names[k],
                    ngx_http_idempotency_metrics_le[b] / 1000,
                    ngx_http_idempotency_metrics_le[b] % 1000, n);
            }

            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_store_operation_duration_seconds_sum"
                "{store=\"%V\",operation=\"%s\"} %uA.%03uA\n"
                "nginx_idempotency_store_operation_duration_seconds_count"
                "{store=\"%V\",operation=\"%s\"} %uA\n",
                &mo->labels[i], ngx_http_idempotency_metrics_ops_names[k],
                m->op_msec[k] / 1000, m->op_msec[k] % 1000,
                &mo->labels[i], ngx_http_idempotency_metrics_ops_names[k],
                n);
        }
    }
}


/* the figures of store i's cache zone; NGX_DECLINED: it has none */

static ngx_int_t
ngx_http_idempotency_metrics_zone(ngx_http_idempotency_mout_t *mo,
    ngx_uint_t i, ngx_http_idempotency_cache_stats_t *cs)
{
    if (mo->stores[i]->cache == NULL) {
        return NGX_DECLINED;
    }

    return ngx_http_idempotency_cache_stats(mo->stores[i]->cache, cs);
}


/* the cache zone's gauges */

static void
ngx_http_idempotency_metrics_cache(ngx_http_idempotency_mout_t *mo)
{
    ngx_uint_t                          i;
    ngx_http_idempotency_cache_stats_t  cs;

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_cache_bytes", "gauge",
        "The cache zone: its size, and the bytes of it in use.");

    for (i = 0; i < mo->nstores; i++) {
        if (ngx_http_idempotency_metrics_zone(mo, i, &cs) != NGX_OK) {
            continue;
        }

        ngx_http_idempotency_metrics_printf(mo,
            "nginx_idempotency_cache_bytes{store=\"%V\",state=\"size\"} "
            "%uz\n"
            "nginx_idempotency_cache_bytes{store=\"%V\",state=\"used\"} "
            "%uz\n", &mo->labels[i], cs.size, &mo->labels[i], cs.used);
    }

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_cache_entries", "gauge",
        "Entries in the cache zone.");

    for (i = 0; i < mo->nstores; i++) {
        if (ngx_http_idempotency_metrics_zone(mo, i, &cs) != NGX_OK) {
            continue;
        }

        ngx_http_idempotency_metrics_printf(mo,
            "nginx_idempotency_cache_entries{store=\"%V\"} %ui\n",
            &mo->labels[i], cs.entries);
    }
}


/* the workers' gauges of each store: published, and not stale */

static void
ngx_http_idempotency_metrics_gauges(ngx_http_idempotency_mout_t *mo)
{
    ngx_uint_t                           i, w, redis_up;
    ngx_atomic_uint_t                    in_progress, held;
    ngx_http_idempotency_metrics_t      *m;
    ngx_http_idempotency_worker_slot_t  *ws;

    for (i = 0; i < mo->nstores; i++) {
        m = mo->stores[i]->metrics;

        if (m == NULL) {
            continue;
        }

        in_progress = 0;
        held = 0;
        redis_up = 1;

        for (w = 0; w < mo->nworkers; w++) {
            ws = &m->worker[w];

            if (ws->pid == 0) {
                continue;
            }

            in_progress += ws->in_progress;
            held += ws->held;

            if (!ws->redis_up) {
                redis_up = 0;
            }
        }

        mo->in_progress[i] = in_progress;
        mo->held[i] = held;
        mo->redis_up[i] = redis_up;
    }

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_keys_in_progress", "gauge",
        "Keys this nginx holds: claimed, and not yet completed or released.");

    for (i = 0; i < mo->nstores; i++) {
        if (mo->stores[i]->metrics) {
            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_keys_in_progress{store=\"%V\"} %uA\n",
                &mo->labels[i], mo->in_progress[i]);
        }
    }

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_held_requests", "gauge",
        "Duplicates held by idempotency_wait while their key is in "
        "progress.");

    for (i = 0; i < mo->nstores; i++) {
        if (mo->stores[i]->metrics) {
            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_held_requests{store=\"%V\"} %uA\n",
                &mo->labels[i], mo->held[i]);
        }
    }

    ngx_http_idempotency_metrics_family(mo,
        "nginx_idempotency_redis_up", "gauge",
        "1 when no worker has Redis down, 0 when one has.");

    for (i = 0; i < mo->nstores; i++) {
        if (mo->stores[i]->metrics && mo->stores[i]->redis_name.len) {
            ngx_http_idempotency_metrics_printf(mo,
                "nginx_idempotency_redis_up{store=\"%V\"} %ui\n",
                &mo->labels[i], mo->redis_up[i]);
        }
    }
}


/* each MySQL server: up, its connections and wait queue */

static void
ngx_http_idempotency_metrics_servers(ngx_http_idempotency_mout_t *mo)
{
    ngx_str_t                          *server;
    ngx_uint_t                          i, j, w, f;
    ngx_atomic_uint_t                   v[4];
    ngx_http_idempotency_shard_t       *shards;
    ngx_http_idempotency_metrics_t     *m;
    ngx_http_idempotency_conns_slot_t   *ps;

    static const char  *families[][3] = {
        { "nginx_idempotency_mysql_up", "gauge",
          "1 when no worker has the server down, 0 when one has." },
        { "nginx_idempotency_mysql_connections", "gauge",
          "Connections to the server, idle or busy, over all workers." },
        { "nginx_idempotency_mysql_queue", "gauge",
          "Operations waiting for a connection to the server." },
    };

    for (f = 0; f < 3; f++) {
        ngx_http_idempotency_metrics_family(mo, families[f][0],
                                            families[f][1], families[f][2]);

        for (i = 0; i < mo->nstores; i++) {
            m = mo->stores[i]->metrics;
            shards = mo->stores[i]->shards.elts;

            for (j = 0; m && j < m->nservers; j++) {
                v[0] = 1;
                v[1] = 0;
                v[2] = 0;
                v[3] = 0;

                for (w = 0; w < mo->nworkers; w++) {
                    ps = &m->pools[j * NGX_HTTP_IDEMPOTENCY_MAX_WORKERS + w];

                    if (ps->pid == 0) {
                        continue;
                    }

                    if (!ps->up) {
                        v[0] = 0;
                    }

                    v[1] += ps->idle;
                    v[2] += ps->busy;
                    v[3] += ps->queued;
                }

                server = ngx_http_idempotency_metrics_label(mo->pool,
                                                            &shards[j].name);
                if (server == NULL) {
                    mo->error = 1;
                    return;
                }

                if (f == 0) {
                    ngx_http_idempotency_metrics_printf(mo,
                        "nginx_idempotency_mysql_up{store=\"%V\","
                        "server=\"%V\"} %uA\n", &mo->labels[i], server,
                        v[0]);

                } else if (f == 1) {
                    ngx_http_idempotency_metrics_printf(mo,
                        "nginx_idempotency_mysql_connections{store=\"%V\","
                        "server=\"%V\",state=\"idle\"} %uA\n"
                        "nginx_idempotency_mysql_connections{store=\"%V\","
                        "server=\"%V\",state=\"busy\"} %uA\n",
                        &mo->labels[i], server, v[1], &mo->labels[i],
                        server, v[2]);

                } else {
                    ngx_http_idempotency_metrics_printf(mo,
                        "nginx_idempotency_mysql_queue{store=\"%V\","
                        "server=\"%V\"} %uA\n", &mo->labels[i], server,
                        v[3]);
                }
            }
        }
    }
}


static void
ngx_http_idempotency_metrics_family(ngx_http_idempotency_mout_t *mo,
    const char *name, const char *type, const char *help)
{
    ngx_http_idempotency_metrics_printf(mo, "# HELP %s %s\n# TYPE %s %s\n",
                                        name, help, name, type);
}


/* a line into the output chain; each line is well under a buffer */

static void
ngx_http_idempotency_metrics_printf(ngx_http_idempotency_mout_t *mo,
    const char *fmt, ...)
{
    va_list       args;
    ngx_buf_t    *b;
    ngx_chain_t  *cl;

    if (mo->error) {
        return;
    }

    b = mo->b;

    if (b == NULL || b->end - b->last < NGX_HTTP_IDEMPOTENCY_METRICS_LINE) {
        b = ngx_create_temp_buf(mo->pool, NGX_HTTP_IDEMPOTENCY_METRICS_BUF);
        cl = ngx_alloc_chain_link(mo->pool);

        if (b == NULL || cl == NULL) {
            mo->error = 1;
            return;
        }

        cl->buf = b;
        cl->next = NULL;
        *mo->last = cl;
        mo->last = &cl->next;
        mo->b = b;
    }

    va_start(args, fmt);
    b->last = ngx_vslprintf(b->last, b->end, fmt, args);
    va_end(args);
}


/* a label value: \, " and newline escaped, as the text format wants */

static ngx_str_t *
ngx_http_idempotency_metrics_label(ngx_pool_t *pool, ngx_str_t *value)
{
    u_char     *p, *s;
    ngx_str_t  *label;

    label = ngx_palloc(pool, sizeof(ngx_str_t));
    if (label == NULL) {
        return NULL;
    }

    p = ngx_pnalloc(pool, 2 * value->len + 1);
    if (p == NULL) {
        return NULL;
    }

    label->data = p;

    for (s = value->data; s < value->data + value->len; s++) {
        if (*s == '\\' || *s == '"') {
            *p++ = '\\';
            *p++ = *s;

        } else if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';

        } else {
            *p++ = *s;
        }
    }

    label->len = p - label->data;

    return label;
}
