-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- wrk script of `make bench-scale`: replays of random keys among
-- PREFIX-1 .. PREFIX-N, which bench/scale.py wrote into the table
-- spread over all of it (so that a replay reads a random, mostly cold,
-- page), and PCT_NEW % fresh keys (default 0).
--   wrk ... -s bench/lua/cold.lua URL -- PREFIX N [PCT_NEW]
local dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
dofile(dir .. "common.lua")

local count, pct_new, prefix, fresh
local n = 0

function init(args)
    prefix = args[1] or "cold"
    count = tonumber(args[2] or "1000")
    pct_new = tonumber(args[3] or "0")
    fresh = unique_prefix()
end

function request()
    if pct_new > 0 and math.random(1, 100) <= pct_new then
        n = n + 1
        return keyed_request(fresh .. "-" .. n)
    end
    return keyed_request(prefix .. "-" .. math.random(1, count))
end
