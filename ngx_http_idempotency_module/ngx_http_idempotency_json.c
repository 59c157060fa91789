
/*
 * Copyright (C) 2026 The ngx_http_idempotency_module authors
 * SPDX-License-Identifier: BSD-2-Clause
 */


/*
 * ngx_http_idempotency_module: JSON members by path in a streamed body.
 *
 * yajl's parser (the Debian package libyajl2) reads the body a piece at a
 * time, as nginx has it (buffers in memory, slices of a temp file), and
 * calls back for each token; only a token cut by a piece's end is copied,
 * by yajl.  The scan keeps, for each level of nesting up to the longest
 * path, the paths that may still lead somewhere from there, as a mask:
 * a value whose level is a path's length and whose mask has the path is
 * reported.  The whole text is parsed, whatever was found early: a body
 * that is not JSON, or names a member twice, is not read as a key.
 */


#include <ngx_config.h>
#include <ngx_core.h>

#include <yajl/yajl_parse.h>

#include "ngx_http_idempotency_json.h"


struct ngx_http_idempotency_json_s {
    yajl_handle                          yajl;
    ngx_pool_t                          *pool;
    ngx_http_idempotency_json_path_t    *paths;
    ngx_uint_t                           npaths;
    ngx_http_idempotency_json_found_pt   found;
    void                                *data;

    ngx_uint_t                           depth;    /* containers open */
    ngx_uint_t                           max;      /* levels tracked */
    ngx_str_t                            error;

    /* by level, 1 to max: the container there */
    uint32_t                            *in;       /* paths inside it */
    uint32_t                            *at;       /* its current item */
    ngx_int_t                           *index;    /* array's item, or -2 */
};


static void ngx_http_idempotency_json_cleanup(void *data);
static int ngx_http_idempotency_json_value(ngx_http_idempotency_json_t *j,
    ngx_uint_t kind, u_char *p, size_t len);
static ngx_int_t ngx_http_idempotency_json_failed(
    ngx_http_idempotency_json_t *j);

static int ngx_http_idempotency_json_null(void *ctx);
static int ngx_http_idempotency_json_boolean(void *ctx, int v);
static int ngx_http_idempotency_json_number(void *ctx, const char *p,
    size_t len);
static int ngx_http_idempotency_json_string(void *ctx, const unsigned char *p,
    size_t len);
static int ngx_http_idempotency_json_start_map(void *ctx);
static int ngx_http_idempotency_json_map_key(void *ctx,
    const unsigned char *p, size_t len);
static int ngx_http_idempotency_json_start_array(void *ctx);
static int ngx_http_idempotency_json_close(void *ctx);


static yajl_callbacks  ngx_http_idempotency_json_callbacks = {
    ngx_http_idempotency_json_null,
    ngx_http_idempotency_json_boolean,
    NULL,                                  /* integers: as numbers */
    NULL,                                  /* doubles: as numbers */
    ngx_http_idempotency_json_number,
    ngx_http_idempotency_json_string,
    ngx_http_idempotency_json_start_map,
    ngx_http_idempotency_json_map_key,
    ngx_http_idempotency_json_close,
    ngx_http_idempotency_json_start_array,
    ngx_http_idempotency_json_close
};


ngx_int_t
ngx_http_idempotency_json_path(ngx_pool_t *pool, ngx_str_t *text,
    ngx_http_idempotency_json_path_t *path, const char **err)
{
    u_char                            *p, *last, *start;
    ngx_int_t                          n;
    ngx_http_idempotency_json_step_t  *step;

    path->steps = ngx_palloc(pool, NGX_HTTP_IDEMPOTENCY_JSON_STEPS
                                   * sizeof(ngx_http_idempotency_json_step_t));
    if (path->steps == NULL) {
        return NGX_ERROR;
    }

    path->nsteps = 0;

    p = text->data;
    last = p + text->len;

    if (p == last) {
        *err = "the path is empty";
        return NGX_DECLINED;
    }

    while (p < last) {

        if (path->nsteps == NGX_HTTP_IDEMPOTENCY_JSON_STEPS) {
            *err = "the path has more than 16 steps";
            return NGX_DECLINED;
        }

        step = &path->steps[path->nsteps];

        if (*p == '[') {
            for (start = ++p; p < last && *p >= '0' && *p <= '9'; p++) {
                /* void */
            }

            n = (p > start && p - start <= 7) ? ngx_atoi(start, p - start)
                                              : NGX_ERROR;

            if (n == NGX_ERROR || p == last || *p != ']') {
                *err = "an array index is not a number in brackets";
                return NGX_DECLINED;
            }

            p++;
            ngx_str_null(&step->name);
            step->index = n;

        } else {
            if (path->nsteps) {
                if (*p != '.') {
                    *err = "a member's name follows neither \".\" nor the "
                           "start";
                    return NGX_DECLINED;
                }

                p++;
            }

            for (start = p; p < last && *p != '.' && *p != '[' && *p != ']';
                 p++)
            {
                /* void */
            }

            if (p == start) {
                *err = "a member's name is empty";
                return NGX_DECLINED;
            }

            step->name.data = start;
            step->name.len = p - start;
            step->index = -1;
        }

        path->nsteps++;
    }

    return NGX_OK;
}


ngx_http_idempotency_json_t *
ngx_http_idempotency_json_create(ngx_pool_t *pool,
    ngx_http_idempotency_json_path_t *paths, ngx_uint_t n,
    ngx_http_idempotency_json_found_pt found, void *data)
{
    ngx_uint_t                    i, max;
    ngx_pool_cleanup_t           *cln;
    ngx_http_idempotency_json_t  *j;

    if (n > NGX_HTTP_IDEMPOTENCY_JSON_PATHS) {
        return NULL;
    }

    for (max = 0, i = 0; i < n; i++) {
        max = ngx_max(max, paths[i].nsteps);
    }

    j = ngx_pcalloc(pool, sizeof(ngx_http_idempotency_json_t));
    if (j == NULL) {
        return NULL;
    }

    j->in = ngx_pcalloc(pool, (max + 1) * sizeof(uint32_t));
    j->at = ngx_pcalloc(pool, (max + 1) * sizeof(uint32_t));
    j->index = ngx_pcalloc(pool, (max + 1) * sizeof(ngx_int_t));

    cln = ngx_pool_cleanup_add(pool, 0);

    if (j->in == NULL || j->at == NULL || j->index == NULL || cln == NULL) {
        return NULL;
    }

    /* strict RFC 8259: UTF-8 checked, no comments, one value, nothing
     * after it (yajl's defaults) */

    j->yajl = yajl_alloc(&ngx_http_idempotency_json_callbacks, NULL, j);
    if (j->yajl == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_idempotency_json_cleanup;
    cln->data = j;

    j->pool = pool;
    j->paths = paths;
    j->npaths = n;
    j->found = found;
    j->data = data;
    j->max = max;

    return j;
}


static void
ngx_http_idempotency_json_cleanup(void *data)
{
    ngx_http_idempotency_json_t  *j = data;

    yajl_free(j->yajl);
}


ngx_int_t
ngx_http_idempotency_json_feed(ngx_http_idempotency_json_t *j, u_char *p,
    size_t len)
{
    yajl_status  st;

    if (j->error.len) {
        return NGX_DECLINED;
    }

    st = yajl_parse(j->yajl, p, len);

    if (st != yajl_status_ok) {
        return ngx_http_idempotency_json_failed(j);
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_idempotency_json_end(ngx_http_idempotency_json_t *j)
{
    yajl_status  st;

    if (j->error.len) {
        return NGX_DECLINED;
    }

    st = yajl_complete_parse(j->yajl);

    if (st != yajl_status_ok) {
        return ngx_http_idempotency_json_failed(j);
    }

    return NGX_OK;
}


void
ngx_http_idempotency_json_error(ngx_http_idempotency_json_t *j,
    ngx_str_t *why)
{
    *why = j->error;
}


/*
 * yajl's words, without the byte where it stopped: yajl counts from the
 * piece a token cut in two began in, so the number would depend on how
 * the body happened to arrive
 */

static ngx_int_t
ngx_http_idempotency_json_failed(ngx_http_idempotency_json_t *j)
{
    u_char  *msg, *end;

    msg = yajl_get_error(j->yajl, 0, NULL, 0);
    if (msg == NULL) {
        return NGX_ERROR;
    }

    /* the message ends with a period and a newline */

    for (end = msg + ngx_strlen(msg);
         end > msg && (end[-1] <= ' ' || end[-1] == '.');
         end--)
    {
        /* void */
    }

    j->error.len = end - msg;
    j->error.data = ngx_pnalloc(j->pool, j->error.len + 1);

    if (j->error.data == NULL) {
        j->error.len = 0;
        yajl_free_error(j->yajl, msg);
        return NGX_ERROR;
    }

    ngx_memcpy(j->error.data, msg, j->error.len);
    yajl_free_error(j->yajl, msg);

    if (j->error.len == 0) {
        ngx_str_set(&j->error, "error");
    }

    return NGX_DECLINED;
}


/*
 * A value at the current place: reported to the paths that end there; a
 * container's start opens the next level for the paths that go on.
 */

static int
ngx_http_idempotency_json_value(ngx_http_idempotency_json_t *j,
    ngx_uint_t kind, u_char *p, size_t len)
{
    uint32_t                           here, next;
    ngx_uint_t                         i, level;
    ngx_http_idempotency_json_step_t  *step;

    level = j->depth;

    if (level == 0) {
        /* the whole text: every path starts inside it */
        here = (1u << j->npaths) - 1;

    } else if (level <= j->max) {

        if (j->index[level] != -2) {
            /* an array's next item */
            j->index[level]++;
            here = 0;

            for (i = 0; i < j->npaths; i++) {
                if ((j->in[level] & (1u << i))
                    && j->paths[i].steps[level - 1].index == j->index[level])
                {
                    here |= 1u << i;
                }
            }

            j->at[level] = here;
        }

        here = j->at[level];

        for (i = 0; here && i < j->npaths; i++) {
            if ((here & (1u << i)) && j->paths[i].nsteps == level) {
                j->found(j->data, i, kind, p, len);
            }
        }

    } else {
        here = 0;
    }

    if (kind != NGX_HTTP_IDEMPOTENCY_JSON_OBJECT
        && kind != NGX_HTTP_IDEMPOTENCY_JSON_ARRAY)
    {
        return 1;
    }

    level = ++j->depth;

    if (level > j->max) {
        return 1;
    }

    next = 0;

    for (i = 0; here && i < j->npaths; i++) {
        if (!(here & (1u << i)) || j->paths[i].nsteps < level) {
            continue;
        }

        step = &j->paths[i].steps[level - 1];

        if ((step->index < 0) == (kind == NGX_HTTP_IDEMPOTENCY_JSON_OBJECT)) {
            next |= 1u << i;
        }
    }

    j->in[level] = next;
    j->at[level] = 0;
    j->index[level] = (kind == NGX_HTTP_IDEMPOTENCY_JSON_ARRAY) ? -1 : -2;

    return 1;
}


static int
ngx_http_idempotency_json_null(void *ctx)
{
    return ngx_http_idempotency_json_value(ctx, NGX_HTTP_IDEMPOTENCY_JSON_NULL,
                                           NULL, 0);
}


static int
ngx_http_idempotency_json_boolean(void *ctx, int v)
{
    return ngx_http_idempotency_json_value(ctx,
                                           NGX_HTTP_IDEMPOTENCY_JSON_BOOLEAN,
                                           NULL, 0);
}


static int
ngx_http_idempotency_json_number(void *ctx, const char *p, size_t len)
{
    return ngx_http_idempotency_json_value(ctx,
                                           NGX_HTTP_IDEMPOTENCY_JSON_NUMBER,
                                           (u_char *) p, len);
}


static int
ngx_http_idempotency_json_string(void *ctx, const unsigned char *p,
    size_t len)
{
    return ngx_http_idempotency_json_value(ctx,
                                           NGX_HTTP_IDEMPOTENCY_JSON_STRING,
                                           (u_char *) p, len);
}


static int
ngx_http_idempotency_json_start_map(void *ctx)
{
    return ngx_http_idempotency_json_value(ctx,
                                           NGX_HTTP_IDEMPOTENCY_JSON_OBJECT,
                                           NULL, 0);
}


static int
ngx_http_idempotency_json_start_array(void *ctx)
{
    return ngx_http_idempotency_json_value(ctx,
                                           NGX_HTTP_IDEMPOTENCY_JSON_ARRAY,
                                           NULL, 0);
}


/* a member's name: which paths go on into its value */

static int
ngx_http_idempotency_json_map_key(void *ctx, const unsigned char *p,
    size_t len)
{
    ngx_http_idempotency_json_t  *j = ctx;

    uint32_t                           at;
    ngx_uint_t                         i, level;
    ngx_http_idempotency_json_step_t  *step;

    level = j->depth;

    if (level == 0 || level > j->max) {
        return 1;
    }

    at = 0;

    for (i = 0; i < j->npaths; i++) {
        if (!(j->in[level] & (1u << i))) {
            continue;
        }

        step = &j->paths[i].steps[level - 1];

        if (step->name.len == len
            && ngx_memcmp(step->name.data, p, len) == 0)
        {
            at |= 1u << i;
        }
    }

    j->at[level] = at;

    return 1;
}


static int
ngx_http_idempotency_json_close(void *ctx)
{
    ngx_http_idempotency_json_t  *j = ctx;

    j->depth--;

    return 1;
}
