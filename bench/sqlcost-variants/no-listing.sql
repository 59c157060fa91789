-- Copyright (C) 2026 The ngx_http_idempotency_module authors
-- SPDX-License-Identifier: BSD-2-Clause
--
-- mysql/schema.sql without ix_state_created: what the listing index
-- costs a first request (its entry added by the claim and moved by the
-- completion).  Not a schema to run: the listing then scans the table.

ALTER TABLE idempotency_keys DROP KEY ix_state_created;
