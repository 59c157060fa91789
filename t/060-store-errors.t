# The store down, hung or full: reject (503) or pass, and recovery.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: store down, reject: 503 problem+json with Retry-After
--- http_config
    idempotency_store down mysql=127.0.0.1:1 user=u password=sekrit-pw database=d;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders { idempotency down; proxy_pass http://backend; }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t060-1
--- request
POST /orders
x
--- error_code: 503
--- response_headers
Retry-After: 1
Content-Type: application/problem+json
--- response_body_like: "type":"urn:ngx-idempotency:problem:store-unavailable".*"status":503
--- error_log
idempotency store "down" mysql=127.0.0.1:1
rejecting the request
--- no_error_log
sekrit-pw



=== TEST 1b: store down, reject: the upstream never saw the request
--- http_config
    idempotency_store down mysql=127.0.0.1:1 user=u password=p database=d;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders { idempotency down; proxy_pass http://backend; }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t060-1b
--- request eval
["POST /orders\nx", "GET /count?key=t060-1b"]
--- error_code eval
[503, 200]
--- response_body_like eval
['store-unavailable', '^0$']



=== TEST 2: store down, pass: forwarded unprotected with a warning
--- http_config
    idempotency_store down mysql=127.0.0.1:1 user=u password=p database=d;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders {
        idempotency down;
        idempotency_on_store_error pass;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
--- more_headers
Idempotency-Key: t060-2
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: error", "X-Idem: error"]
--- response_body_like eval
['"execution":1', '"execution":2']



=== TEST 2b: store down, pass: the warning
--- http_config
    idempotency_store down mysql=127.0.0.1:1 user=u password=p database=d;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders {
        idempotency down;
        idempotency_on_store_error pass;
        proxy_pass http://backend;
    }
--- more_headers
Idempotency-Key: t060-2b
--- request
POST /orders
x
--- error_code: 201
--- error_log
passing the request unprotected



=== TEST 3: a hung store (accepts, never answers): bounded by the timeout
--- http_config eval
"idempotency_store hung mysql=127.0.0.1:$ENV{TEST_NGINX_BACKEND_PORT} user=u password=p database=d connect_timeout=300ms query_timeout=500ms;\n"
. "upstream backend { server 127.0.0.1:$ENV{TEST_NGINX_BACKEND_PORT}; }\n"
--- config
    location /orders { idempotency hung; proxy_pass http://backend; }
--- more_headers
Idempotency-Key: t060-3
--- request
POST /orders
x
--- error_code: 503
--- error_log
idempotency store "hung"



=== TEST 4: wrong credentials: 503, the driver's error in the log, no password
--- http_config
    idempotency_store bad mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT user=$TEST_NGINX_MYSQL_USER password=wrong-pw-123 database=$TEST_NGINX_MYSQL_DB;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders { idempotency bad; proxy_pass http://backend; }
--- more_headers
Idempotency-Key: t060-4
--- request
POST /orders
x
--- error_code: 503
--- error_log
Access denied for user
--- no_error_log
wrong-pw-123



=== TEST 5: a missing table is named in the log
--- http_config
    idempotency_store main mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB table=no_such_table;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders { idempotency main; proxy_pass http://backend; }
--- more_headers
Idempotency-Key: t060-5
--- request
POST /orders
x
--- error_code: 503
--- error_log
the table is missing or has the wrong columns (apply mysql/schema.sql)



=== TEST 6: the unix socket address works
--- http_config
    idempotency_store main mysql=unix:$TEST_NGINX_MYSQL_SOCKET user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders {
        idempotency main;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
--- more_headers
Idempotency-Key: t060-6
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]
--- no_error_log
[error]



=== TEST 7: a pool of one connection and no wait queue serves requests in turn
--- http_config
    idempotency_store main mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB pool=1 wait_queue=0;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders {
        idempotency main;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
--- more_headers
Idempotency-Key: t060-7
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]



=== TEST 8: the store comes back: the module recovers by itself
--- http_config
    idempotency_store flaky mysql=127.0.0.1:3399 user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config
    location /orders {
        idempotency flaky;
        proxy_pass http://backend;
        add_header X-Idem $idempotency_status always;
    }
--- init
my $code = `curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Idempotency-Key: t060-8' --data-binary x http://127.0.0.1:@{[port()]}/orders`;
$code eq '503' or die "with the store away: $code";
$main::proxy = tcp_proxy(3399, $ENV{TEST_NGINX_MYSQL_PORT});
select(undef, undef, undef, 0.6);
--- more_headers
Idempotency-Key: t060-8
--- request
POST /orders
x
--- error_code: 201
--- response_headers
X-Idem: new
--- error_log
reachable again



=== TEST 9: stop the relay of the previous test
--- init
kill 'TERM', $main::proxy if $main::proxy;
waitpid($main::proxy, 0) if $main::proxy;
--- config
    location /t { return 200 "ok\n"; }
--- request
GET /t
--- response_body
ok
