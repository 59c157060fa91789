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
--- config eval
IdemTest::orders_location(idempotency => 'down', count => 1)
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
--- config eval
IdemTest::orders_location(idempotency => 'down', count => 1)
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
--- config eval
IdemTest::orders_location(idempotency => 'down',
    idempotency_on_store_error => 'pass', add_header => 'X-Idem')
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
--- config eval
IdemTest::orders_location(idempotency => 'down',
    idempotency_on_store_error => 'pass')
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
--- config eval
IdemTest::orders_location(idempotency => 'hung')
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
--- config eval
IdemTest::orders_location(idempotency => 'bad')
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
--- config eval
IdemTest::orders_location()
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
--- config eval
IdemTest::orders_location(add_header => 'X-Idem')
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



=== TEST 7: a pool of one connection and no wait queue: a request that finds it busy gets 503 at once
--- http_config
    idempotency_store main mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB pool=1 wait_queue=0 query_timeout=8s purge=off;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config eval
IdemTest::orders_location(add_header => 'X-Idem', count => 1)
--- init
# a session of our own holds the row of key a, uncommitted: the claim of
# a waits for it in the server, on the only connection of the pool
my $kh = key_hash_hex('t060-7a');
my $out = server_root() . "/t060-7.lock";
unlink $out;
my $cmd = join ' ', map { "'$_'" } 'mariadb', '--no-defaults', '--batch',
    '--skip-column-names', '--unbuffered', '-h', '127.0.0.1',
    '-P', $ENV{TEST_NGINX_MYSQL_PORT}, '-u', $ENV{TEST_NGINX_MYSQL_USER},
    "-p$ENV{TEST_NGINX_MYSQL_PASSWORD}", $ENV{TEST_NGINX_MYSQL_DB};
open my $lock, '|-', "$cmd > '$out' 2>&1" or die "mariadb: $!";
$lock->autoflush(1);
print $lock "BEGIN; INSERT INTO idempotency_keys (key_hash, owner,"
    . " fingerprint, created_at, lease_until, expires_at) VALUES (X'$kh',"
    . " X'00000000000000000000000000000007', X'" . ('0' x 64) . "',"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3));"
    . " SELECT 'locked';\n";
IdemStress::wait_for('the row lock', 30, sub {
    open my $fh, '<', $out or return 0; local $/; (<$fh> // '') =~ /locked/
});
my $pid = bg_request('POST', '/orders', 't060-7a', 'x', 0);
IdemStress::wait_for('the claim of key a waiting on the row lock', 30, sub {
    sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST"
        . " WHERE COMMAND IN ('Query', 'Execute') AND INFO LIKE 'INSERT%'"
        . " AND ID <> CONNECTION_ID()") =~ /^[1-9]/
});
# key b needs the connection while a holds it, and may not queue: it
# fails at once (were it queued, it would wait for the lock until curl
# gives up, long before query_timeout)
my $rb = curl_post('/orders', 't060-7b', '--max-time', '5', '-w', '\n%{http_code}');
print $lock "ROLLBACK;\n";
close $lock;
unlink $out;
waitpid($pid, 0);
like($rb, qr/\n503\z/, 'TEST 7: key b, finding the only connection busy: 503');
like($rb, qr/"type":"urn:ngx-idempotency:problem:store-unavailable"/,
     'TEST 7: ... store-unavailable');
my $log = do {
    local $/;
    open my $fh, '<', server_root() . '/logs/error.log' or die "error.log: $!";
    <$fh>;
};
my $id = IdemStress::key_id('t060-7b');
like($log, qr/claim of key \Q$id\E failed: no free connection \(pool and wait queue full\), rejecting the request/,
     'TEST 7: ... because the pool and its wait queue were full');
# a, once the row was free, was claimed, executed and stored
my $ra = curl_post('/orders', 't060-7a', '-i');
like($ra, qr{^HTTP/1\.1 201 .*^Idempotent-Replayed: true\r$}ms,
     'TEST 7: key a, claimed once the row was free, is replayed');
--- more_headers
Idempotency-Key: t060-7b
--- request eval
["POST /orders\nx", "GET /count?key=t060-7a", "GET /count?key=t060-7b"]
--- error_code eval
[201, 200, 200]
--- response_headers eval
["X-Idem: new", "", ""]
--- response_body_like eval
['"key":"t060-7b","execution":1,', '^1$', '^1$']



=== TEST 8: the store comes back: the module recovers by itself
--- http_config
    idempotency_store flaky mysql=127.0.0.1:3399 user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD database=$TEST_NGINX_MYSQL_DB;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- config eval
IdemTest::orders_location(idempotency => 'flaky', add_header => 'X-Idem')
--- init
my $code = curl_post('/orders', 't060-8', '-o', '/dev/null', '-w', '%{http_code}');
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
