-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- wrk script: a fresh Idempotency-Key per request
-- (per-thread random prefix + per-thread counter).
--   wrk ... -s bench/lua/unique.lua URL
local dir = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
dofile(dir .. "common.lua")

local prefix
local n = 0

function init(args)
    prefix = unique_prefix()
end

function request()
    n = n + 1
    return keyed_request(prefix .. "-" .. n)
end
