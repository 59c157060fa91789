# A client that goes away does not end a protected exchange: the upstream
# runs to its end, the module captures and stores the whole response, and
# the retry that is sure to come replays it.  Every case counts the
# executions (exactly one) and compares the replayed body with what the
# backend sent.  The client that leaves is sent by --- init; the block's
# requests are its retry (held until the first request ends) and the
# count.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use AppServers qw(app_location count_location);

# curl as the client that leaves: "status bytes-received"
sub leaving_client {
    my ($port, $uri, $key, @opt) = @_;

    return `curl -s -o /dev/null -w '%{http_code} %{size_download}' @opt -X POST -H 'Idempotency-Key: $key' --data-binary x 'http://127.0.0.1:$port$uri'`;
}

# the body of size=N: byte i is i % 251
sub pattern { CORE::join('', map { chr($_ % 251) } 0 .. $_[0] - 1) }

# the servers of the blocks that need one more: a small socket buffer and
# small proxy buffers, where what the client does not read goes to a temp
# file; HTTP/2
$ENV{TEST_NGINX_SPILL_PORT} = IdemTest::extra_port(133);
$ENV{TEST_NGINX_H2_PORT} = IdemTest::extra_port(132);

our $SPILL = IdemTest::location('/spill', idempotency_wait => '10s',
                                proxy_buffers => '4 4k',
                                proxy_busy_buffers_size => '8k',
                                proxy_pass => 'http://backend/orders');

# a retry waits for the first request's end instead of 409; what arrives
# is sent at once, however small
our $ORDERS = IdemTest::orders_location(idempotency_wait => '10s',
                                        postpone_output => 0,
                                        add_header => 'X-Idem', count => 1);

# the first request's log line is in the log before the block's requests
check_accum_error_log();

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(pool => 8)
                   . "idempotency_max_response_size 8m;\n",
    config => $ORDERS . $SPILL
              . IdemTest::location('/unbuffered', idempotency_wait => '10s',
                                   proxy_buffering => 'off',
                                   postpone_output => 0,
                                   proxy_pass => 'http://backend/orders')
              # the suite's PHP-FPM (backend/app.php), and its count
              . app_location('/fcgi', php => '127.0.0.1:$TEST_NGINX_PHPFPM_PORT')
              . count_location(php => '127.0.0.1:$TEST_NGINX_PHPFPM_PORT'),
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: client gone before the status line: the retry gets the first answer, replayed, and it ran once
--- init
like(main::leaving_client(port(), '/orders?delay=1500', 't130-before',
                          '--max-time', '0.5'),
     qr/^000 0$/, 'client gone before the status line: the client got nothing');
--- more_headers
Idempotency-Key: t130-before
--- request eval
["POST /orders?delay=1500\nx", "GET /count?key=t130-before"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t130-before","execution":1,', '^1$']
--- timeout: 10



=== TEST 2: client gone mid-body (half of 64 KB, the rest 1.5 s later): the retry gets the whole body, byte for byte, and it ran once
--- init
my $got = main::leaving_client(port(), '/orders?size=65536&slow_body=1500',
                               't130-mid', '--max-time', '0.5');
ok($got =~ /^201 (\d+)$/ && $1 > 0 && $1 < 65536,
   'client gone mid-body: the client had the status and part of the body')
    or diag("client: $got");
--- more_headers
Idempotency-Key: t130-mid
--- request eval
["POST /orders?size=65536&slow_body=1500\nx", "GET /count?key=t130-mid"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[main::pattern(65536), "1"]
--- timeout: 10



=== TEST 3: client gone while a 2 MB body streams through a temp file: the retry gets the whole body, and it ran once
--- http_config eval
IdemTest::store_config(pool => 8) . "idempotency_max_response_size 8m;\n"
. IdemTest::server('$TEST_NGINX_SPILL_PORT sndbuf=16k', $main::SPILL)
--- init
like(main::leaving_client($ENV{TEST_NGINX_SPILL_PORT},
                          '/spill?size=2097152&slow_body=1500', 't130-spill',
                          '--limit-rate', '16k', '--max-time', '1'),
     qr/^201 \d+$/, 'client gone, a temp file: the client had the status');
--- more_headers
Idempotency-Key: t130-spill
--- request eval
["POST /spill?size=2097152&slow_body=1500\nx", "GET /count?key=t130-spill"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[main::pattern(2097152), "1"]
--- error_log
buffered to a temporary file
--- timeout: 20



=== TEST 4: client gone mid-body (headers and 1 KB, the rest 1.5 s later), proxy_buffering off: the retry gets the whole body, and it ran once
--- init
like(main::leaving_client(port(), '/unbuffered?size=2048&slow_body=1500',
                          't130-unbuf', '--max-time', '0.5'),
     qr/^201 1024$/, 'proxy_buffering off: the client had the status and 1 KB');
--- more_headers
Idempotency-Key: t130-unbuf
--- request eval
["POST /unbuffered?size=2048&slow_body=1500\nx", "GET /count?key=t130-unbuf"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[main::pattern(2048), "1"]
--- timeout: 10



=== TEST 5: client gone before the status line, fastcgi_pass to PHP-FPM: the retry gets the first answer, and the app ran it once
--- init
main::leaving_client(port(), '/fcgi?delay=1500', 't130-fcgi', '--max-time', '0.5');
--- more_headers
Idempotency-Key: t130-fcgi
--- request eval
["POST /fcgi?delay=1500\nx", "GET /__count?key=t130-fcgi"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t130-fcgi","execution":1,', '^1$']
--- timeout: 10



=== TEST 6: client gone mid-body, fastcgi_pass to PHP-FPM: the retry gets the whole body, and the app ran it once
--- init
main::leaving_client(port(), '/fcgi?size=200000&slow_body=1500', 't130-fcgi-mid',
                     '--max-time', '0.5');
--- more_headers
Idempotency-Key: t130-fcgi-mid
--- request eval
["POST /fcgi?size=200000&slow_body=1500\nx", "GET /__count?key=t130-fcgi-mid"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[main::pattern(200000), "1"]
--- timeout: 10



=== TEST 7: HTTP/2 stream reset while the upstream works: the retry gets the first answer, and it ran once
--- http_config eval
IdemTest::store_config(pool => 8) . "idempotency_max_response_size 8m;\n"
. "server {\n    " . IdemStress::listen_http2('127.0.0.1:$TEST_NGINX_H2_PORT', '    ')
. "\n" . $main::ORDERS . "}\n"
--- init
my $h2 = $ENV{TEST_NGINX_H2_PORT};
like(`node t/tools/h2-reset.js $h2 '/orders?delay=1500' t130-h2 x 500`,
     qr/^reset/, 'HTTP/2: the client reset its stream');
--- more_headers
Idempotency-Key: t130-h2
--- request eval
["POST /orders?delay=1500\nx", "GET /count?key=t130-h2"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t130-h2","execution":1,', '^1$']
--- timeout: 10
