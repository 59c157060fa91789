-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- Shared by the wrk scripts of `make bench` (loaded with dofile).
--
-- A request is a POST of a small JSON body with an Idempotency-Key.
-- done() prints one machine-readable line that bench/run.py parses:
--   BENCH requests=N duration_us=N p50_us=N p90_us=N p99_us=N ...
-- and one with the latency distribution (percentile:microseconds, the
-- last one the maximum), for the latency chart:
--   BENCHDIST 0:N 1:N 5:N ... 99.99:N 100:N

wrk.method = "POST"
wrk.body = '{"amount":4200,"currency":"EUR","customer":"cus_42"}'
wrk.headers["Content-Type"] = "application/json"

local threads = {}
local next_id = 0

-- runs in the main state once per thread, before it starts
function setup(thread)
    next_id = next_id + 1
    thread:set("thread_id", next_id)
    table.insert(threads, thread)
end

-- a request with key k (the key is the only header that varies);
-- wrk.format() takes either its headers argument or wrk.headers, so
-- the common headers are copied in
function keyed_request(k)
    local h = { ["Idempotency-Key"] = k }
    for name, value in pairs(wrk.headers) do
        h[name] = value
    end
    return wrk.format(nil, nil, h)
end

-- a prefix no other thread, run or round shares
function unique_prefix()
    local id = thread_id or 0
    math.randomseed(os.time() * 1000 + id * 7919 + math.floor(os.clock() * 1e6))
    return string.format("u%08x%08x-%d", math.random(0, 0x7fffffff),
                         math.random(0, 0x7fffffff), id)
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d bytes=%d p50_us=%d p90_us=%d " ..
        "p99_us=%d mean_us=%.1f max_us=%d err_connect=%d err_read=%d " ..
        "err_write=%d err_status=%d err_timeout=%d\n",
        summary.requests, summary.duration, summary.bytes,
        latency:percentile(50), latency:percentile(90),
        latency:percentile(99), latency.mean, latency.max,
        e.connect, e.read, e.write, e.status, e.timeout))
    local dist = { "BENCHDIST 0:" .. latency.min }
    for _, p in ipairs({ 1, 5, 10, 25, 50, 75, 90, 95, 98, 99, 99.5, 99.8,
                         99.9, 99.95, 99.99 }) do
        table.insert(dist, p .. ":" .. latency:percentile(p))
    end
    table.insert(dist, "100:" .. latency.max)
    io.write(table.concat(dist, " ") .. "\n")
end
