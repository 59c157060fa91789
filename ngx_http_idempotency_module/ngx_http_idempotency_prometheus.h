
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: "idempotency_metrics;", the metrics in
 * Prometheus' text format, and the workers' gauges it reads (each
 * worker publishes its connections, leases and held duplicates).
 */


#ifndef _NGX_HTTP_IDEMPOTENCY_PROMETHEUS_H_INCLUDED_
#define _NGX_HTTP_IDEMPOTENCY_PROMETHEUS_H_INCLUDED_


#include "ngx_http_idempotency_module.h"


/* starts the worker's publishing timer (init_process) */
ngx_int_t ngx_http_idempotency_metrics_init_process(ngx_cycle_t *cycle);

/* "idempotency_metrics;" */
char *ngx_http_idempotency_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


#endif /* _NGX_HTTP_IDEMPOTENCY_PROMETHEUS_H_INCLUDED_ */
