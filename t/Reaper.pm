# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package Reaper;

# Makes the test process the one that adopts the nginx it starts as a
# daemon (Linux PR_SET_CHILD_SUBREAPER), so that the waitpid() of
# OpenResty's Test::Nginx reaps it as soon as it exits.  Without it the
# daemon is adopted by init, which on some machines reaps orphans only
# now and then: the exited nginx stays a zombie that kill(0) still sees,
# and Test::Nginx waits for it at every block (1-2 s each).

use strict;
use warnings;

eval {
    local $SIG{__WARN__} = sub {};
    package Reaper::Syscall;
    require 'sys/syscall.ph';
    syscall(&SYS_prctl, 36, 1, 0, 0, 0);
};

1;
