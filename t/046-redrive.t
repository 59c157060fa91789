# idempotency_on_unknown_outcome redrive: for a backend that deduplicates
# by itself (the seed's dedup table on its side: a UNIQUE key on the
# Idempotency-Key it receives, and the first answer for a duplicate), a
# retry after an unknown outcome is forwarded again, marked
# Idempotency-Attempt: redrive at the next epoch, and the backend's answer
# becomes the key's.  backend/app.py's dedup=1 is such a backend; without
# it the backend runs the operation a second time, which is what the
# directive documents for a backend that does not take part.  Redrives
# stop at idempotency_max_attempts.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

block_defaults(config => orders_location(
    idempotency_on_unknown_outcome => 'redrive',
    idempotency_epoch_header => 'Idempotency-Epoch',
    proxy_read_timeout => '1s', add_header => 'X-Idem', count => 1));

run_tests();

__DATA__

=== TEST 1: the first attempt answers after proxy_read_timeout; the retry is redriven and gets the first answer, which is then replayed; one execution
--- more_headers
Idempotency-Key: t046-1
--- request eval
["POST /orders?dedup=1&delay=1500\nx", "POST /orders?dedup=1&delay=1500\nx",
 "POST /orders?dedup=1&delay=1500\nx", "GET /count?key=t046-1"]
--- error_code eval
[504, 201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: redrive\nX-Deduplicated: redrive\n!Idempotent-Replayed",
 "Idempotent-Replayed: true\nX-Deduplicated: redrive", ""]
--- response_body_like eval
['', '"execution":1', '"execution":1', '^1$']
--- timeout: 10



=== TEST 2: a backend that does not deduplicate: redriven, and executed twice, what the directive is not for
--- more_headers
Idempotency-Key: t046-3
--- init
IdemTest::curl_post('/orders?delay=1500', 't046-3');
IdemTest::wait_state('t046-3', 3);
sleep 1;
--- request eval
["POST /orders?delay=1500\nx", "GET /count?key=t046-3"]
--- error_code eval
[504, 200]
--- response_headers eval
["X-Idem: redrive", ""]
--- response_body_like eval
['', '^2$']
--- timeout: 10



=== TEST 3: redrives stop at idempotency_max_attempts: 504 attempts-exhausted
--- config eval
IdemTest::orders_location(idempotency_on_unknown_outcome => 'redrive',
    idempotency_max_attempts => 2, proxy_read_timeout => '1s',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t046-4
--- request eval
["POST /orders?delay=1500\nx", "POST /orders?delay=1500\nx",
 "POST /orders?delay=1500\nx", "GET /count?key=t046-4"]
--- error_code eval
[504, 504, 504, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: redrive", "X-Idem: exhausted\nX-Should-Retry: false", ""]
--- response_body_like eval
['', '', 'attempts-exhausted', '^2$']
--- timeout: 15



=== TEST 4: a redrive with idempotency_fence fails nginx -t: the marker decides there
--- config
    location /t {
        idempotency main;
        idempotency_fence main;
        idempotency_on_unknown_outcome redrive;
        proxy_pass http://backend;
    }
--- must_die
--- error_log
"idempotency_on_unknown_outcome redrive" is for a backend that deduplicates by itself
