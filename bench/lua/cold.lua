-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- wrk script of `make bench-scale`: replays of the keys PREFIX-1 ..
-- PREFIX-N, which bench/scale.py wrote into the table spread over all
-- of it, and PCT_NEW % fresh keys (default 0).  The keys are walked in
-- a scattered order (a step coprime to N, near N times the golden
-- ratio, so that keys in turn lie far apart in the table) from START,
-- the THREADS threads evenly spaced along it, so that a key comes back
-- only after all the others, and no thread follows close behind
-- another: with N keys' pages several times the buffer pool, a key's
-- page has been evicted by then and every replay is a cold one.
--   wrk ... -s bench/lua/cold.lua URL -- PREFIX N [PCT_NEW [THREADS START]]
local dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
dofile(dir .. "common.lua")

local count, pct_new, prefix, fresh, pos, step
local n = 0

local function gcd(a, b)
    while b ~= 0 do
        a, b = b, a % b
    end
    return a
end

function init(args)
    prefix = args[1] or "cold"
    count = tonumber(args[2] or "1000")
    pct_new = tonumber(args[3] or "0")
    fresh = unique_prefix()     -- seeds math.random per thread
    local threads = tonumber(args[4] or "1")
    local start = tonumber(args[5] or math.random(0, count - 1))
    step = math.floor(count * 0.6180339887)
    while step == 0 or gcd(step, count) ~= 1 do
        step = step + 1
    end
    -- thread t starts t/THREADS of the walk after START
    local lag = ((thread_id or 1) - 1) * math.floor(count / threads) % count
    pos = (start + lag * step) % count
end

function request()
    if pct_new > 0 and math.random(1, 100) <= pct_new then
        n = n + 1
        return keyed_request(fresh .. "-" .. n)
    end
    pos = (pos + step) % count
    return keyed_request(prefix .. "-" .. (pos + 1))
end
