# The three outcomes of a forwarded request, decided where nginx knows
# them: not sent (no byte of it reached an upstream: the key is given
# back), answered (a complete response from whichever upstream or location
# produced it: stored), unknown (sent, and no complete response came
# back: never run again, never replayed, and retries get 502
# outcome-unknown).  Each retry path below is one execution, counted by
# the backend.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use IO::Socket::INET ();
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Time::HiRes ();
use POSIX ();

sub count {
    my ($key) = @_;
    return http_req(method => 'GET', uri => "/count?key=$key")->{body};
}

# a client connection that sends the request and then does not read
sub stalled_client {
    my ($port, $key, $uri) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port)
        or die "connect: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096);
    print $s "POST $uri HTTP/1.1\r\nHost: localhost\r\n"
           . "Idempotency-Key: $key\r\nContent-Length: 1\r\n\r\nx";
    return $s;
}

sub sql_root_main {
    return sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_);
}

# until a session other than this one runs a statement LIKE $info
sub wait_running {
    my ($what, $info) = @_;

    IdemStress::wait_for($what, 30, sub {
        sql_root_main("SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                      . " WHERE INFO LIKE '$info' AND ID <> CONNECTION_ID()")
            =~ /^[1-9]/ });
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: gateway timeout: the first client gets nginx's 504, a retry outcome-unknown, the backend ran it once
--- config eval
IdemTest::orders_location(proxy_read_timeout => '1s',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t045-1
--- request eval
["POST /orders?delay=2000\nx", "POST /orders?delay=2000\nx", "GET /count?key=t045-1"]
--- error_code eval
[504, 502, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\nContent-Type: application/problem+json\n!Retry-After\n!Idempotent-Replayed", ""]
--- response_body_like eval
['504 Gateway Time-out', '^\{"type":"urn:ngx-idempotency:problem:outcome-unknown","title":"Outcome unknown","status":502,', '^1$']
--- timeout: 8



=== TEST 1b: the log says why the outcome is unknown
--- config eval
IdemTest::orders_location(proxy_read_timeout => '1s')
--- more_headers
Idempotency-Key: t045-1b
--- request
POST /orders?delay=2000
x
--- error_code: 504
--- error_log
idempotency: key 
no complete response came back from the upstream; its outcome is unknown, and it is not executed again
--- timeout: 8



=== TEST 2: idempotency_store_5xx on: nginx's own 504 is still never replayed as the backend's answer
--- config eval
IdemTest::orders_location(proxy_read_timeout => '1s',
    idempotency_store_5xx => 'on', add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t045-2
--- request eval
["POST /orders?delay=2000\nx", "POST /orders?delay=2000\nx", "GET /count?key=t045-2"]
--- error_code eval
[504, 502, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\n!Idempotent-Replayed", ""]
--- response_body_like eval
['504 Gateway Time-out', 'problem:outcome-unknown', '^1$']
--- timeout: 8



=== TEST 3: idempotency_on_unknown_outcome release keeps the old release, for backends whose operations are safe to repeat
--- config eval
IdemTest::orders_location(proxy_read_timeout => '1s',
    idempotency_on_unknown_outcome => 'release', add_header => 'X-Idem',
    count => 1)
--- more_headers
Idempotency-Key: t045-3
--- request eval
["POST /orders?delay=2000\nx", "POST /orders?delay=2000\nx", "GET /count?key=t045-3"]
--- error_code eval
[504, 504, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: new", ""]
--- response_body_like eval
['504', '504', '^2$']
--- timeout: 8



=== TEST 4: the backend resets mid-response: the first client has a cut response, a retry outcome-unknown, one execution
--- config eval
IdemTest::orders_location(add_header => 'X-Idem', count => 1)
--- init
my $r = http_req(key => 't045-4', uri => '/orders?reset=1', body => 'x');
is($r->{status}, 201, 'the first client: the status line');
cmp_ok(length $r->{body}, '<', 1000, '... and a cut body');
# recorded when the request ends, after its client has the cut response
# (a retry before that is answered 409)
wait_state('t045-4', 3);
--- more_headers
Idempotency-Key: t045-4
--- request eval
["POST /orders?reset=1\nx", "GET /count?key=t045-4"]
--- error_code eval
[502, 200]
--- response_headers eval
["X-Idem: unknown", ""]
--- response_body_like eval
['problem:outcome-unknown', '^1$']



=== TEST 5: a reset mid-response, unbuffered: the same
--- config eval
IdemTest::orders_location(proxy_buffering => 'off', count => 1)
--- init
http_req(key => 't045-5', uri => '/orders?reset=1', body => 'x');
wait_state('t045-5', 3);
--- more_headers
Idempotency-Key: t045-5
--- request eval
["POST /orders?reset=1\nx", "GET /count?key=t045-5"]
--- error_code eval
[502, 200]
--- response_body_like eval
['problem:outcome-unknown', '^1$']



=== TEST 6: not sent (connect refused): the key is given back, a retry runs it
--- config eval
IdemTest::orders_location(proxy_pass => 'http://127.0.0.1:1',
    add_header => 'X-Idem')
--- more_headers
Idempotency-Key: t045-6
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[502, 502]
--- response_headers eval
["X-Idem: new", "X-Idem: new"]



=== TEST 7: failover with error_page to a named location without idempotency: the backup's answer is stored and replayed
--- config
    location /orders {
        idempotency main;
        proxy_pass http://127.0.0.1:1;
        error_page 502 = @backup;
    }
    location @backup {
        proxy_pass http://backend;
    }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t045-7
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t045-7"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t045-7","execution":1', '"key":"t045-7","execution":1', '^1$']



=== TEST 8: failover, and the client leaves while the backup works: the backup's exchange runs to its end, the retry replays it
--- config
    location /orders {
        idempotency main;
        proxy_pass http://127.0.0.1:1;
        error_page 502 = @backup;
    }
    location @backup {
        proxy_pass http://backend;
    }
    location = /count { proxy_pass http://backend/__count; }
--- init
curl_post('/orders?delay=1500', 't045-8', '--max-time', '0.5');
sleep 2;
--- more_headers
Idempotency-Key: t045-8
--- request eval
["POST /orders?delay=1500\nx", "GET /count?key=t045-8"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t045-8","execution":1', '^1$']



=== TEST 9: try_files to a named location: the application's answer is stored
--- config
    location /orders {
        idempotency main;
        try_files /nonexistent @app;
    }
    location @app {
        proxy_pass http://backend;
    }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t045-9
--- request eval
["POST /orders\nx", "POST /orders\nx", "GET /count?key=t045-9"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"execution":1', '"execution":1', '^1$']



=== TEST 10: error_page to nginx's own page after a gateway timeout: the page is not the backend's answer
--- config
    location /orders {
        idempotency main;
        proxy_pass http://backend;
        proxy_read_timeout 1s;
        error_page 504 /sorry;
        add_header X-Idem $idempotency_status always;
    }
    location = /sorry { return 504 "sorry\n"; }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t045-10
--- request eval
["POST /orders?delay=2000\nx", "POST /orders?delay=2000\nx", "GET /count?key=t045-10"]
--- error_code eval
[504, 502, 200]
--- response_body_like eval
['^sorry$', 'problem:outcome-unknown', '^1$']
--- timeout: 8



=== TEST 10b: an intercepted 503 sent to a backup that times out: the outcome is unknown, not a 5xx to give back
--- config
    location /orders {
        idempotency main;
        proxy_pass http://backend;
        proxy_intercept_errors on;
        error_page 503 = @backup;
    }
    location @backup {
        rewrite ^ /orders?delay=2000 break;
        proxy_pass http://backend;
        proxy_read_timeout 1s;
    }
    location = /count { proxy_pass http://backend/__count; }
--- more_headers
Idempotency-Key: t045-10b
--- request eval
["POST /orders?status=503\nx", "POST /orders?status=503\nx", "GET /count?key=t045-10b"]
--- error_code eval
[504, 502, 200]
--- response_body_like eval
['504', 'problem:outcome-unknown', '^2$']
--- timeout: 8



=== TEST 10c: HEAD as a protected method: complete with its header, replayed
--- config eval
IdemTest::orders_location(idempotency_methods => 'HEAD POST',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t045-10c
--- request eval
["HEAD /orders", "HEAD /orders", "GET /count?key=t045-10c"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- response_body eval
["", "", "1"]



=== TEST 10d: HEAD of a static file in a protected location: the header alone, no body after it
--- config
    location /static/ {
        idempotency main;
        idempotency_methods HEAD POST;
        alias html/;
    }
--- user_files eval
[[ 'big.bin' => ('A' x 300000) ]]
--- init
my $r = http_req(method => 'HEAD', key => 't045-10d', uri => '/static/big.bin');
is($r->{status}, 200, 'HEAD: 200');
is(length $r->{body}, 0, 'no body after the header');
--- request
GET /static/big.bin
--- error_code: 200



=== TEST 11: a slow reader is a client that left: send_timeout does not cut the upstream, the response is stored, the retry replays it
--- http_config eval
IdemTest::store_config() . "server {\n listen 127.0.0.1:" . (IdemTest::port() + 1) . " sndbuf=8k;\n send_timeout 1s;\n"
. IdemTest::orders_location(idempotency_max_response_size => '1m') . "}\n"
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '1m', count => 1)
--- init
my $s = main::stalled_client(port() + 1, 't045-11',
                             '/orders?size=600000&slow_body=2500');
sleep 4;
close $s;
--- more_headers
Idempotency-Key: t045-11
--- request eval
["POST /orders?size=600000&slow_body=2500\nx", "GET /count?key=t045-11"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true\nContent-Length: 600000", ""]
--- response_body_like eval
['^\x00\x01\x02', '^1$']
--- timeout: 10



=== TEST 11b: a slow reader of a response the upstream sent in full at once: the rest waits in nginx, and is still stored
--- http_config eval
IdemTest::store_config() . "server {\n listen 127.0.0.1:" . (IdemTest::port() + 1) . " sndbuf=8k;\n send_timeout 1s;\n"
. IdemTest::orders_location(idempotency_max_response_size => '1m') . "}\n"
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '1m', count => 1)
--- init
my $s = main::stalled_client(port() + 1, 't045-11b', '/orders?size=600000');
sleep 3;
close $s;
--- more_headers
Idempotency-Key: t045-11b
--- request eval
["POST /orders?size=600000\nx", "GET /count?key=t045-11b"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true\nContent-Length: 600000", ""]
--- response_body_like eval
['^\x00\x01\x02', '^1$']
--- timeout: 10



=== TEST 11c: an HTTP/2 client that stops reading a response of an unbuffered upstream: the upstream is read on, the response stored
--- http_config eval
IdemTest::store_config() . "server {\n    "
. IdemStress::listen_http2('127.0.0.1:' . (IdemTest::port() + 1), '    ')
. "\n    send_timeout 1s;\n"
. IdemTest::orders_location(idempotency_max_response_size => '4m',
    proxy_buffering => 'off') . "}\n"
--- config eval
IdemTest::orders_location(idempotency_max_response_size => '4m', count => 1)
--- init
my $port = port() + 1;
my $out = `node t/tools/h2-stall.js $port '/orders?size=3000000' t045-11c 3000`;
like($out, qr/status 201 got \d+/, 'the client read the start, then stopped (and is reset as gone)');
--- more_headers
Idempotency-Key: t045-11c
--- request eval
["POST /orders?size=3000000\nx", "GET /count?key=t045-11c"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true\nContent-Length: 3000000", ""]
--- response_body_like eval
['^\x00\x01\x02', '^1$']
--- timeout: 20



=== TEST 12: an issued key's expiry bounds its first use only: its retry after the expiry is replayed; an unused expired key gets 400
--- http_config eval
TierTest::tier_stores(main => 'secret=t045-secret-0123456789abcdef')
--- config eval
IdemTest::orders_location(idempotency_keys => 'issued',
    add_header => 'X-Idem', count => 1) . q{
    location = /keys { idempotency main; idempotency_key_issuer 2s; }
}
--- init
my ($key) = http_req(method => 'GET', uri => '/keys')->{body} =~ /"key":"([^"]+)"/;
my ($unused) = http_req(method => 'GET', uri => '/keys')->{body} =~ /"key":"([^"]+)"/;
my $r = http_req(key => $key, body => 'x');
is("$r->{status} $r->{idem}", '201 new', 'used within its expiry');
sleep 3;
$r = http_req(key => $key, body => 'x');
is("$r->{status} $r->{idem}", '201 replay', 'its retry after the expiry: replayed');
like($r->{body}, qr/"execution":1/, '... the first result');
$r = http_req(key => $unused, body => 'x');
is($r->{status}, 400, 'an expired key that was never used: 400');
like($r->{body}, qr/problem:key-not-issued/, '... key-not-issued');
is(main::count($key), 1, 'executed once');
--- request
GET /count?key=-
--- error_code: 200
--- timeout: 10



=== TEST 13: header-only responses reach the client once stored: a duplicate right behind each of 25 204s over HTTP/2 is a replay
--- http_config eval
IdemTest::store_config() . "server {\n    "
. IdemStress::listen_http2('127.0.0.1:' . (IdemTest::port() + 1), '    ')
. "\n" . IdemTest::orders_location() . "}\n"
--- config eval
IdemTest::orders_location(count => 1)
--- init
my $port = port() + 1;
my @bad;
for my $i (1 .. 25) {
    my $key = "t045-13-$i";
    my $o1 = `curl -s --http2-prior-knowledge -X POST -H 'Idempotency-Key: $key' --data-binary x -D - -o /dev/null 'http://127.0.0.1:$port/orders?status=204'`;
    my $o2 = `curl -s --http2-prior-knowledge -X POST -H 'Idempotency-Key: $key' --data-binary x -D - -o /dev/null 'http://127.0.0.1:$port/orders?status=204'`;
    push @bad, "$key first: $o1" unless $o1 =~ m{^HTTP/2 204};
    push @bad, "$key second: $o2"
        unless $o2 =~ m{^HTTP/2 204} && $o2 =~ /idempotent-replayed: true/i
               && $o2 !~ /content-length/i;
}
is(scalar @bad, 0, 'every duplicate right behind its 204 is a replay, without a Content-Length')
    or diag(join "\n", @bad);
is(main::count("t045-13-$_"), 1, "204 $_: executed once") for 1, 13, 25;
--- request
GET /count?key=-
--- error_code: 200
--- timeout: 30



=== TEST 14: a 204 over HTTP/1.1 replays as it came
--- config eval
IdemTest::orders_location(count => 1)
--- more_headers
Idempotency-Key: t045-14
--- request eval
["POST /orders?status=204\nx", "POST /orders?status=204\nx", "GET /count?key=t045-14"]
--- error_code eval
[204, 204, 200]
--- response_headers eval
["!Content-Length", "Idempotent-Replayed: true\n!Content-Length", ""]
--- response_body eval
["", "", "1"]



=== TEST 15: a claim whose INSERT timed out (it waited for a lock, and commits later) is given back: the retry runs at once, not after the lease
--- http_config eval
IdemTest::store_config(query_timeout => '1s')
--- config eval
IdemTest::orders_location(idempotency_lease => '20s', add_header => 'X-Idem',
    count => 1)
--- init
my $h = key_hash_hex('t045-15');
my $pid = fork // die;
if ($pid == 0) {
    sql("BEGIN; INSERT INTO idempotency_keys (key_hash, state, owner,"
        . " fingerprint, created_at, lease_until, expires_at) VALUES"
        . " (X'$h', 0, X'00', X'00', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3),"
        . " UTC_TIMESTAMP(3)); DO SLEEP(2.5); ROLLBACK");
    POSIX::_exit(0);
}
main::wait_running('the row lock', 'DO SLEEP%');
my $r = http_req(key => 't045-15', body => 'x');
is("$r->{status} $r->{idem}", '503 error', 'the claim timed out: 503, not run');
waitpid($pid, 0);
sleep 1;
is(sql("SELECT COUNT(*) FROM idempotency_keys WHERE key_hash = X'$h'"
       . " AND state <> 4 AND expires_at > UTC_TIMESTAMP(3)"), "0\n",
   'the INSERT that committed after its timeout was given back');
--- more_headers
Idempotency-Key: t045-15
--- request eval
["POST /orders\nx", "GET /count?key=t045-15"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: new", ""]
--- response_body_like eval
['"execution":1', '^1$']
--- timeout: 10



=== TEST 16: a failed connect fails only the op it was made for: a claim queued behind a live connection waits for it
--- http_config eval
IdemTest::store_config(pool => 2, query_timeout => '5s')
    =~ s/user=\$TEST_NGINX_MYSQL_USER password=\$TEST_NGINX_MYSQL_PASSWORD/user=idem1c password=idem1c-secret/r
--- config eval
IdemTest::orders_location(add_header => 'X-Idem', count => 1)
--- init
main::sql_root_main("DROP USER IF EXISTS 'idem1c'\@'%'; CREATE USER 'idem1c'\@'%' IDENTIFIED BY 'idem1c-secret' WITH MAX_USER_CONNECTIONS 1; GRANT SELECT, INSERT, UPDATE, DELETE ON $ENV{TEST_NGINX_MYSQL_DB}.* TO 'idem1c'\@'%'");
http_req(key => 't045-16-warm', body => 'x');
my $h = key_hash_hex('t045-16-a');
my $pid = fork // die;
if ($pid == 0) {
    sql("BEGIN; INSERT INTO idempotency_keys (key_hash, state, owner,"
        . " fingerprint, created_at, lease_until, expires_at) VALUES"
        . " (X'$h', 0, X'00', X'00', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3),"
        . " UTC_TIMESTAMP(3)); DO SLEEP(2.5); ROLLBACK");
    POSIX::_exit(0);
}
main::wait_running('the row lock', 'DO SLEEP%');
my $a = fork // die;
if ($a == 0) {
    http_req(key => 't045-16-a', body => 'x');
    POSIX::_exit(0);
}
main::wait_running('the claim of a waiting on the row lock', 'INSERT%');
my $r = http_req(key => 't045-16-b', body => 'x');
is("$r->{status} $r->{idem}", '201 new', 'b waited for the live connection instead of failing with the connect');
waitpid($a, 0);
waitpid($pid, 0);
main::sql_root_main("DROP USER IF EXISTS 'idem1c'\@'%'");
--- request
GET /count?key=t045-16-b
--- error_code: 200
--- response_body: 1
--- error_log
connect failed
--- timeout: 15



=== TEST 17: 1461 (max_prepared_stmt_count): the statement is prepared again on a new connection and runs once more
--- http_config eval
IdemTest::store_config(pool => 1)
--- config eval
IdemTest::orders_location(add_header => 'X-Idem', count => 1)
--- init
my $r = http_req(key => 't045-17', body => 'x');
is("$r->{status} $r->{idem}", '201 new', 'the first request');
# the server counts every client's statements: wait until only this
# nginx's one connection holds any (its INSERT and its UPDATE)
my $n;
IdemStress::wait_for('no statements but ours', 10, sub {
    ($n) = main::sql_root_main("SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'")
           =~ /(\d+)/;
    $n <= 2 }, 0.1);
main::sql_root_main("SET GLOBAL max_prepared_stmt_count = $n");
$r = eval { http_req(key => 't045-17', body => 'x') };
main::sql_root_main("SET GLOBAL max_prepared_stmt_count = DEFAULT");
is("$r->{status} $r->{idem}", '201 replay', 'the duplicate: its READ prepared again, replayed');
--- request
GET /count?key=t045-17
--- error_code: 200
--- response_body: 1
--- error_log
(1461) Can't create more than max_prepared_stmt_count statements
preparing it again



=== TEST 18: the claim epoch reaches the backend in idempotency_epoch_header (a client's header of that name is replaced), and $idempotency_epoch
--- config
    location /orders {
        idempotency main;
        idempotency_epoch_header Idempotency-Epoch;
        add_header X-Epoch $idempotency_epoch always;
        proxy_pass http://127.0.0.1:$server_port/echo;
    }
    location = /echo { return 201 "epoch=$http_idempotency_epoch\n"; }
--- init
my $fp = fingerprint('POST', '/orders', 'x');
my $h = key_hash_hex('t045-18-b');
sql("INSERT INTO idempotency_keys (key_hash, state, owner, epoch, fingerprint,"
    . " created_at, lease_until, expires_at) VALUES (X'$h', 0, X'00', 4,"
    . " X'$fp', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) - INTERVAL 1 SECOND,"
    . " UTC_TIMESTAMP(3) + INTERVAL 1 HOUR)");
--- request eval
["POST /orders\nx", "POST /orders\nx", "POST /orders\nx"]
--- more_headers eval
["Idempotency-Key: t045-18-a\nIdempotency-Epoch: 99", "Idempotency-Key: t045-18-a", "Idempotency-Key: t045-18-b"]
--- error_code eval
[201, 201, 201]
--- response_headers eval
["X-Epoch: 1", "Idempotent-Replayed: true\n!X-Epoch", "X-Epoch: 5"]
--- response_body eval
["epoch=1\n", "epoch=1\n", "epoch=5\n"]



=== TEST 18b: the epoch never falls back: a takeover (5) answered 5xx gives the key back, and the next claim is 6, not 1
--- config
    location /o500 {
        idempotency main;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_pass http://127.0.0.1:$server_port/echo500;
    }
    location /orders {
        idempotency main;
        idempotency_epoch_header Idempotency-Epoch;
        proxy_pass http://127.0.0.1:$server_port/echo;
    }
    location = /echo500 { return 500 "epoch=$http_idempotency_epoch\n"; }
    location = /echo { return 201 "epoch=$http_idempotency_epoch\n"; }
--- init
my $fp = fingerprint('POST', '/o500', 'x');
my $h = key_hash_hex('t045-18c');
sql("INSERT INTO idempotency_keys (key_hash, state, owner, epoch, fingerprint,"
    . " created_at, lease_until, expires_at) VALUES (X'$h', 0, X'00', 4,"
    . " X'$fp', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) - INTERVAL 1 SECOND,"
    . " UTC_TIMESTAMP(3) + INTERVAL 1 HOUR)");
--- more_headers
Idempotency-Key: t045-18c
--- request eval
["POST /o500\nx", "POST /orders\nx"]
--- error_code eval
[500, 201]
--- response_body eval
["epoch=5\n", "epoch=6\n"]



=== TEST 19: nginx -t warns where a protected location lets nginx resend a sent request to another upstream
--- init
my $dir = "$ENV{TEST_NGINX_SERVROOT}-t045";
mkdir $dir;
open my $f, '>', "$dir/nginx.conf" or die $!;
print $f "load_module $ENV{TEST_NGINX_LOAD_MODULES};\n"
       . "error_log $dir/error.log;\npid $dir/nginx.pid;\nevents {}\n"
       . "http { idempotency_store main mysql=127.0.0.1:1 user=u database=d;\n"
       . " server { listen 127.0.0.1:1;\n"
       . "  location /a { idempotency main; proxy_pass http://127.0.0.1:2;\n"
       . "   proxy_next_upstream error timeout non_idempotent; }\n"
       . "  location /b { idempotency main; fastcgi_pass 127.0.0.1:2;\n"
       . "   fastcgi_next_upstream error non_idempotent; }\n"
       . "  location /c { idempotency main; proxy_pass http://127.0.0.1:2; }\n"
       . " } }\n";
close $f;
my $out = `$ENV{TEST_NGINX_BINARY} -p $dir/ -c $dir/nginx.conf -t 2>&1`;
like($out, qr/syntax is ok/, 'nginx -t passes');
like($out, qr/\[warn\].*"proxy_next_upstream \.\.\. non_idempotent" in location "\/a" lets nginx send a request it has sent already to another upstream/,
     'a warning for proxy_next_upstream non_idempotent');
like($out, qr/\[warn\].*"fastcgi_next_upstream \.\.\. non_idempotent" in location "\/b"/,
     '... and for fastcgi_next_upstream');
unlike($out, qr/location "\/c"/, 'none for a location that does not resend');
--- config
    location = /t { return 200 ok; }
--- request
GET /t
--- error_code: 200
