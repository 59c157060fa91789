# A real PHP-FPM (scripts/services.sh php-fpm, backend/app.php) behind
# fastcgi_pass: the replay of a PHP answer byte for byte, one execution
# for concurrent duplicates in several PHP-FPM workers, and every way a
# PHP request can end without its answer (fastcgi_read_timeout, PHP-FPM's
# request_terminate_timeout before and after the first byte, a worker
# killed mid-body): the app never runs twice, and retries get 502
# outcome-unknown.  Answers are replayed buffered, unbuffered and with
# fastcgi_keep_conn.  The app counts its executions across its workers.
#
# A block's --- init sends the first request and checks its answer, and
# its retry against it (AppServers); the block's requests repeat the
# retry and read the app's count.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use AppServers;

# every byte value, then back, then 64 NULs: the app's binary=1
sub binary { CORE::join('', map { chr($_) } 0..255, CORE::reverse(0..255)) . ("\0" x 64) }

our $FPM = '127.0.0.1:$TEST_NGINX_PHPFPM_PORT';

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(pool => 8)
                   . "idempotency_max_response_size 8m;\n",
    config => "    add_header X-Idem \$idempotency_status always;\n"
              . app_location('/orders', php => $FPM)
              . app_location('/slow/', php => $FPM, "fastcgi_read_timeout 1s;\n")
              # PHP-FPM's pool "term": request_terminate_timeout 2s
              . app_location('/term/', php => 'unix:$TEST_NGINX_PHPFPM_TERM_SOCKET')
              # the end of an answer is FastCGI's records, noted another
              # way unbuffered, and with the connection kept
              . app_location('/unbuffered/', php => $FPM, "fastcgi_buffering off;\n")
              . app_location('/keep-conn/', php => $FPM, "fastcgi_keep_conn on;\n")
              . count_location(php => $FPM),
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: a binary body and two cookies: the first answer, and its replay: the status, every header the app sent, the body byte for byte; the app ran it once
--- init
first_binary('t085-binary');
--- more_headers
Idempotency-Key: t085-binary
--- request eval
["POST /orders?binary=1&cookies=2\nx", "GET /__count?key=t085-binary"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n", ""]
--- response_body eval
[main::binary(), "1"]



=== TEST 2: a 300 KB body in two parts: the first answer, and its replay byte for byte; the app ran it once
--- init
first_large('t085-large');
--- more_headers
Idempotency-Key: t085-large
--- request eval
["POST /orders?size=300000&slow_body=300\nx", "GET /__count?key=t085-large"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(300000), "1"]
--- timeout: 10



=== TEST 3: ten concurrent duplicates: all get 201 with the same body, nine as replays; the app ran it once
--- init
race('t085-race');
--- more_headers
Idempotency-Key: t085-race
--- request eval
["POST /orders?delay=1000\nx", "GET /__count?key=t085-race"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t085-race","execution":1,', '^1$']
--- timeout: 10



=== TEST 4: a binary body and two cookies (/unbuffered): the first answer, and its replay: the status, every header the app sent, the body byte for byte; the app ran it once
--- init
first_binary('t085-binary-unbuffered', '/unbuffered');
--- more_headers
Idempotency-Key: t085-binary-unbuffered
--- request eval
["POST /unbuffered/orders?binary=1&cookies=2\nx", "GET /__count?key=t085-binary-unbuffered"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n", ""]
--- response_body eval
[main::binary(), "1"]



=== TEST 5: a 300 KB body in two parts (/unbuffered): the first answer, and its replay byte for byte; the app ran it once
--- init
first_large('t085-large-unbuffered', '/unbuffered');
--- more_headers
Idempotency-Key: t085-large-unbuffered
--- request eval
["POST /unbuffered/orders?size=300000&slow_body=300\nx", "GET /__count?key=t085-large-unbuffered"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(300000), "1"]
--- timeout: 10



=== TEST 6: ten concurrent duplicates (/unbuffered): all get 201 with the same body, nine as replays; the app ran it once
--- init
race('t085-race-unbuffered', '/unbuffered');
--- more_headers
Idempotency-Key: t085-race-unbuffered
--- request eval
["POST /unbuffered/orders?delay=1000\nx", "GET /__count?key=t085-race-unbuffered"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t085-race-unbuffered","execution":1,', '^1$']
--- timeout: 10



=== TEST 7: a binary body and two cookies (/keep-conn): the first answer, and its replay: the status, every header the app sent, the body byte for byte; the app ran it once
--- init
first_binary('t085-binary-keep-conn', '/keep-conn');
--- more_headers
Idempotency-Key: t085-binary-keep-conn
--- request eval
["POST /keep-conn/orders?binary=1&cookies=2\nx", "GET /__count?key=t085-binary-keep-conn"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n", ""]
--- response_body eval
[main::binary(), "1"]



=== TEST 8: a 300 KB body in two parts (/keep-conn): the first answer, and its replay byte for byte; the app ran it once
--- init
first_large('t085-large-keep-conn', '/keep-conn');
--- more_headers
Idempotency-Key: t085-large-keep-conn
--- request eval
["POST /keep-conn/orders?size=300000&slow_body=300\nx", "GET /__count?key=t085-large-keep-conn"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(300000), "1"]
--- timeout: 10



=== TEST 9: ten concurrent duplicates (/keep-conn): all get 201 with the same body, nine as replays; the app ran it once
--- init
race('t085-race-keep-conn', '/keep-conn');
--- more_headers
Idempotency-Key: t085-race-keep-conn
--- request eval
["POST /keep-conn/orders?delay=1000\nx", "GET /__count?key=t085-race-keep-conn"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t085-race-keep-conn","execution":1,', '^1$']
--- timeout: 10



=== TEST 10: fastcgi_read_timeout: the first client gets 504; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
is(post_key('/slow/orders?delay=2500', 't085-read-timeout')->{status}, 504,
   'fastcgi_read_timeout: the first client: 504');
wait_state('t085-read-timeout', 3);
--- more_headers
Idempotency-Key: t085-read-timeout
--- request eval
["POST /slow/orders?delay=2500\nx", "POST /slow/orders?delay=2500\nx", "GET /__count?key=t085-read-timeout"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 11: request_terminate_timeout before the first byte: the first client gets 502, PHP-FPM ended it; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
my $name = 'request_terminate_timeout before the first byte';
is(post_key('/term/orders?delay=6000', 't085-term-header')->{status}, 502,
   "$name: the first client: 502");
like(IdemStress::read_file("$IdemStress::BUILD/services/php-fpm/php-fpm.log"),
     qr/\[pool term\] child \d+, script '[^']*app\.php' \(request: "POST \/term\/orders\?delay=6000"\) execution timed out/,
     "$name: PHP-FPM ended it");
wait_state('t085-term-header', 3);
--- more_headers
Idempotency-Key: t085-term-header
--- request eval
["POST /term/orders?delay=6000\nx", "POST /term/orders?delay=6000\nx", "GET /__count?key=t085-term-header"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 12: request_terminate_timeout mid-body: the first client had part of the body at most; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
ok(length(post_key('/term/orders?size=100000&slow_body=6000', 't085-term-body')->{body} // '') < 100000,
   'request_terminate_timeout mid-body: the first client had part of the body at most');
wait_state('t085-term-body', 3);
--- more_headers
Idempotency-Key: t085-term-body
--- request eval
["POST /term/orders?size=100000&slow_body=6000\nx", "POST /term/orders?size=100000&slow_body=6000\nx", "GET /__count?key=t085-term-body"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 13: a PHP-FPM worker killed mid-body: the first client had part of the body at most; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
ok(length(post_key('/orders?size=100000&kill=1', 't085-kill')->{body} // '') < 100000,
   'a PHP-FPM worker killed mid-body: the first client had part of the body at most');
wait_state('t085-kill', 3);
--- more_headers
Idempotency-Key: t085-kill
--- request eval
["POST /orders?size=100000&kill=1\nx", "POST /orders?size=100000&kill=1\nx", "GET /__count?key=t085-kill"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 14: a PHP-FPM worker killed mid-body, unbuffered: the first client had part of the body at most; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
ok(length(post_key('/unbuffered/orders?size=100000&kill=1', 't085-kill-unbuffered')->{body} // '') < 100000,
   'a PHP-FPM worker killed mid-body, unbuffered: the first client had part of the body at most');
wait_state('t085-kill-unbuffered', 3);
--- more_headers
Idempotency-Key: t085-kill-unbuffered
--- request eval
["POST /unbuffered/orders?size=100000&kill=1\nx", "POST /unbuffered/orders?size=100000&kill=1\nx", "GET /__count?key=t085-kill-unbuffered"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10
