# Internal redirects, named locations, error_page, subrequests and return
# never claim a key twice nor capture the wrong response.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: return in the same location: nothing is claimed
--- config
    location /orders {
        idempotency main;
        idempotency_required on;
        add_header X-Idem $idempotency_status always;
        return 200 "static\n";
    }
--- request
POST /orders
x
--- error_code: 200
--- response_body
static
--- response_headers
X-Idem: bypass
--- no_error_log
[error]



=== TEST 2: a rewrite into another protected location claims once
--- config eval
IdemTest::orders_location(add_header => 'X-Idem', count => 1) . q{
    location /v1/orders {
        idempotency main;
        rewrite ^/v1(.*)$ $1 last;
    }
}
--- more_headers
Idempotency-Key: t070-2
--- request eval
["POST /v1/orders\nx", "POST /v1/orders\nx", "GET /count?key=t070-2"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 3: try_files to a named location: claimed once, replayed
--- config
    location /orders {
        idempotency main;
        try_files /nonexistent @backend;
        add_header X-Idem $idempotency_status always;
    }
    location @backend {
        idempotency main;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t070-3
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t070-3"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']
--- no_error_log
[error]



=== TEST 4: error_page after an upstream failure: the page is not stored
--- config
    location /orders {
        idempotency main;
        proxy_pass http://127.0.0.1:1;
        error_page 502 =200 /fallback;
    }
    location = /fallback {
        idempotency main;
        add_header X-Idem $idempotency_status always;
        return 200 "fallback\n";
    }
--- more_headers
Idempotency-Key: t070-4
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[200, 200]
--- response_body eval
["fallback\n", "fallback\n"]
--- response_headers eval
["X-Idem: new\n!Idempotent-Replayed", "X-Idem: new\n!Idempotent-Replayed"]



=== TEST 5: an intercepted upstream answer is not stored: it executed, retries get 410
--- config
    location /orders {
        idempotency main;
        proxy_pass http://backend;
        proxy_intercept_errors on;
        error_page 404 = /missing;
    }
    location = /missing { return 404 "not here\n"; }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t070-5
--- request eval
["POST /orders?status=404\nx", "POST /orders?status=404\nx", "GET /count?key=t070-5"]
--- error_code eval
[404, 410, 200]
--- response_body_like eval
["^not here\n\$", '"type":"urn:ngx-idempotency:problem:response-not-stored"', "^1\$"]



=== TEST 6: a mirror subrequest neither claims nor is captured
--- config
    location /orders {
        idempotency main;
        mirror /mirror;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
    location = /mirror {
        internal;
        # counted apart from the main request
        proxy_set_header Idempotency-Key t070-6-mirror;
        proxy_pass http://backend/mirrored;
    }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t070-6
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t070-6",
 "GET /count?key=t070-6-mirror"]
--- error_code eval
[201, 201, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", "", ""]
--- response_body_like eval
['"uri":"/orders"', '"uri":"/orders"', '^1$', '^1$']
--- no_error_log
[error]
