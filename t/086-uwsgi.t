# A real uWSGI (scripts/services.sh uwsgi, backend/wsgi.py) behind
# uwsgi_pass: the replay of a WSGI answer byte for byte, one execution for
# concurrent duplicates in several uWSGI workers, and the ways a request
# can end without its answer (uwsgi_read_timeout, uWSGI's harakiri before
# and after the first byte, a worker killed mid-body): the app never runs
# twice, and retries get 502 outcome-unknown.  The uwsgi protocol has no
# end of its own: a body without Content-Length ends with the connection,
# so a worker that dies in the middle of one ends it as well as a worker
# that finished (TEST 8 shows what that means).
#
# The same app on uWSGI's FastCGI socket behind fastcgi_pass: FastCGI ends
# every answer with records of its own, and uWSGI reads the whole request,
# so a worker killed mid-answer closes the connection cleanly, which nginx
# takes for the end without fastcgi_keep_conn or without buffering.  The
# module sees that the end records never came: the first client's response
# is not ended, and retries get 502 outcome-unknown; answers that ended
# are replayed, buffered or not.
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

our $UWSGI = '127.0.0.1:$TEST_NGINX_UWSGI_PORT';
our $FCGI = "unix:$IdemStress::BUILD/services/uwsgi/sock/fcgi.sock";

# the log line of a block comes before its requests
check_accum_error_log();

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(pool => 8)
                   . "idempotency_max_response_size 8m;\n",
    config => "    add_header X-Idem \$idempotency_status always;\n"
              . app_location('/orders', uwsgi => $UWSGI)
              . app_location('/slow/', uwsgi => $UWSGI, "uwsgi_read_timeout 1s;\n")
              . app_location('/fcgi/', fcgi => $FCGI)
              . app_location('/fcgi-unbuffered/', fcgi => $FCGI,
                             "fastcgi_buffering off;\n")
              . app_location('/fcgi-keep-conn/', fcgi => $FCGI,
                             "fastcgi_keep_conn on;\n")
              . count_location(uwsgi => $UWSGI),
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: a binary body and two cookies: the first answer, and its replay: the status, every header the app sent, the body byte for byte; the app ran it once
--- init
first_binary('t086-binary');
--- more_headers
Idempotency-Key: t086-binary
--- request eval
["POST /orders?binary=1&cookies=2\nx", "GET /__count?key=t086-binary"]
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
first_large('t086-large');
--- more_headers
Idempotency-Key: t086-large
--- request eval
["POST /orders?size=300000&slow_body=300\nx", "GET /__count?key=t086-large"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(300000), "1"]
--- timeout: 10



=== TEST 3: ten concurrent duplicates: all get 201 with the same body, nine as replays; the app ran it once
--- init
race('t086-race');
--- more_headers
Idempotency-Key: t086-race
--- request eval
["POST /orders?delay=1000\nx", "GET /__count?key=t086-race"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t086-race","execution":1,', '^1$']
--- timeout: 10



=== TEST 4: uwsgi_read_timeout: the first client gets 504; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
is(post_key('/slow/orders?delay=2500', 't086-read-timeout')->{status}, 504,
   'uwsgi_read_timeout: the first client: 504');
wait_state('t086-read-timeout', 3);
--- more_headers
Idempotency-Key: t086-read-timeout
--- request eval
["POST /slow/orders?delay=2500\nx", "POST /slow/orders?delay=2500\nx", "GET /__count?key=t086-read-timeout"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 5: harakiri before the first byte: the first client gets 502, uWSGI's master killed the worker; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
my $name = 'harakiri before the first byte';
is(post_key('/orders?harakiri=1&delay=6000', 't086-harakiri-header')->{status}, 502,
   "$name: the first client: 502");
like(IdemStress::read_file("$IdemStress::BUILD/services/uwsgi/uwsgi.log"),
     qr/HARAKIRI ON WORKER/, "$name: uWSGI's master killed the worker");
wait_state('t086-harakiri-header', 3);
--- more_headers
Idempotency-Key: t086-harakiri-header
--- request eval
["POST /orders?harakiri=1&delay=6000\nx", "POST /orders?harakiri=1&delay=6000\nx", "GET /__count?key=t086-harakiri-header"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 6: harakiri mid-body, with a Content-Length: the first client had part of the body at most; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
ok(length(post_key('/orders?harakiri=1&size=100000&slow_body=6000&length=1', 't086-harakiri-body')->{body} // '') < 100000,
   'harakiri mid-body, with a Content-Length: the first client had part of the body at most');
wait_state('t086-harakiri-body', 3);
--- more_headers
Idempotency-Key: t086-harakiri-body
--- request eval
["POST /orders?harakiri=1&size=100000&slow_body=6000&length=1\nx", "POST /orders?harakiri=1&size=100000&slow_body=6000&length=1\nx", "GET /__count?key=t086-harakiri-body"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 7: a uWSGI worker killed mid-body, with a Content-Length: the first client had part of the body at most; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
ok(length(post_key('/orders?size=100000&kill=1&length=1', 't086-kill')->{body} // '') < 100000,
   'a uWSGI worker killed mid-body, with a Content-Length: the first client had part of the body at most');
wait_state('t086-kill', 3);
--- more_headers
Idempotency-Key: t086-kill
--- request eval
["POST /orders?size=100000&kill=1&length=1\nx", "POST /orders?size=100000&kill=1&length=1\nx", "GET /__count?key=t086-kill"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 8: a uWSGI worker killed mid-body, without a Content-Length: the response ended with the connection, as any answer without a length does; the first client got a cleanly ended half, and the retry gets the same half (docs/reliability.md, "Backends")
--- init
my $name = 'a uWSGI worker killed mid-body, without a Content-Length';
my $first = post_key('/orders?size=100000&kill=1', 't086-kill-nolength');
ok($first->{status} == 201 && !$first->{error}
   && $first->{body} eq pattern(50000),
   "$name: the first client got half the body, cleanly ended");
check_replay($name, '/orders?size=100000&kill=1', 't086-kill-nolength', $first);
--- more_headers
Idempotency-Key: t086-kill-nolength
--- request eval
["POST /orders?size=100000&kill=1\nx", "GET /__count?key=t086-kill-nolength"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(50000), "1"]
--- timeout: 10



=== TEST 9: a binary body and two cookies (/fcgi): the first answer, and its replay: the status, every header the app sent, the body byte for byte; the app ran it once
--- init
first_binary('t086-binary-fcgi', '/fcgi');
--- more_headers
Idempotency-Key: t086-binary-fcgi
--- request eval
["POST /fcgi/orders?binary=1&cookies=2\nx", "GET /__count?key=t086-binary-fcgi"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n", ""]
--- response_body eval
[main::binary(), "1"]



=== TEST 10: a 300 KB body in two parts (/fcgi): the first answer, and its replay byte for byte; the app ran it once
--- init
first_large('t086-large-fcgi', '/fcgi');
--- more_headers
Idempotency-Key: t086-large-fcgi
--- request eval
["POST /fcgi/orders?size=300000&slow_body=300\nx", "GET /__count?key=t086-large-fcgi"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(300000), "1"]
--- timeout: 10



=== TEST 11: ten concurrent duplicates (/fcgi): all get 201 with the same body, nine as replays; the app ran it once
--- init
race('t086-race-fcgi', '/fcgi');
--- more_headers
Idempotency-Key: t086-race-fcgi
--- request eval
["POST /fcgi/orders?delay=1000\nx", "GET /__count?key=t086-race-fcgi"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t086-race-fcgi","execution":1,', '^1$']
--- timeout: 10



=== TEST 12: a binary body and two cookies (/fcgi-unbuffered): the first answer, and its replay: the status, every header the app sent, the body byte for byte; the app ran it once
--- init
first_binary('t086-binary-fcgi-unbuffered', '/fcgi-unbuffered');
--- more_headers
Idempotency-Key: t086-binary-fcgi-unbuffered
--- request eval
["POST /fcgi-unbuffered/orders?binary=1&cookies=2\nx", "GET /__count?key=t086-binary-fcgi-unbuffered"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- raw_response_headers_like eval
["Set-Cookie: c1=v1; Path=/\r\nSet-Cookie: c2=v2; Path=/\r\n", ""]
--- response_body eval
[main::binary(), "1"]



=== TEST 13: a 300 KB body in two parts (/fcgi-unbuffered): the first answer, and its replay byte for byte; the app ran it once
--- init
first_large('t086-large-fcgi-unbuffered', '/fcgi-unbuffered');
--- more_headers
Idempotency-Key: t086-large-fcgi-unbuffered
--- request eval
["POST /fcgi-unbuffered/orders?size=300000&slow_body=300\nx", "GET /__count?key=t086-large-fcgi-unbuffered"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body eval
[AppServers::pattern(300000), "1"]
--- timeout: 10



=== TEST 14: ten concurrent duplicates (/fcgi-unbuffered): all get 201 with the same body, nine as replays; the app ran it once
--- init
race('t086-race-fcgi-unbuffered', '/fcgi-unbuffered');
--- more_headers
Idempotency-Key: t086-race-fcgi-unbuffered
--- request eval
["POST /fcgi-unbuffered/orders?delay=1000\nx", "GET /__count?key=t086-race-fcgi-unbuffered"]
--- error_code eval
[201, 200]
--- response_headers eval
["Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t086-race-fcgi-unbuffered","execution":1,', '^1$']
--- timeout: 10



=== TEST 15: FastCGI (/fcgi): a uWSGI worker killed mid-body, without a Content-Length: the first client got the status and part of the body, not ended, and the log says why the outcome is unknown; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
my $name = 'FastCGI (/fcgi): a uWSGI worker killed mid-body, without a Content-Length';
my $first = post_key('/fcgi/orders?size=100000&kill=1', 't086-fcgi-kill');
is($first->{status}, 201, "$name: the first client got the status");
ok(length($first->{body} // '') < 100000 && $first->{error},
   "$name: ... and part of the body, not ended")
    or diag('error: ' . ($first->{error} // 'none') . ', '
            . length($first->{body} // '') . ' bytes');
wait_state('t086-fcgi-kill', 3);
--- more_headers
Idempotency-Key: t086-fcgi-kill
--- request eval
["POST /fcgi/orders?size=100000&kill=1\nx", "POST /fcgi/orders?size=100000&kill=1\nx", "GET /__count?key=t086-fcgi-kill"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- error_log
closed the connection before it ended the request; its outcome
--- timeout: 10



=== TEST 16: FastCGI (/fcgi-unbuffered): a uWSGI worker killed mid-body, without a Content-Length: the first client got the status and part of the body, not ended, and the log says why the outcome is unknown; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
my $name = 'FastCGI (/fcgi-unbuffered): a uWSGI worker killed mid-body, without a Content-Length';
my $first = post_key('/fcgi-unbuffered/orders?size=100000&kill=1', 't086-fcgi-unbuffered-kill');
is($first->{status}, 201, "$name: the first client got the status");
ok(length($first->{body} // '') < 100000 && $first->{error},
   "$name: ... and part of the body, not ended")
    or diag('error: ' . ($first->{error} // 'none') . ', '
            . length($first->{body} // '') . ' bytes');
wait_state('t086-fcgi-unbuffered-kill', 3);
--- more_headers
Idempotency-Key: t086-fcgi-unbuffered-kill
--- request eval
["POST /fcgi-unbuffered/orders?size=100000&kill=1\nx", "POST /fcgi-unbuffered/orders?size=100000&kill=1\nx", "GET /__count?key=t086-fcgi-unbuffered-kill"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- error_log
closed the connection before it ended the request; its outcome
--- timeout: 10



=== TEST 17: FastCGI (/fcgi-keep-conn): a uWSGI worker killed mid-body, without a Content-Length: the first client got the status and part of the body, not ended; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
my $name = 'FastCGI (/fcgi-keep-conn): a uWSGI worker killed mid-body, without a Content-Length';
my $first = post_key('/fcgi-keep-conn/orders?size=100000&kill=1', 't086-fcgi-keep-conn-kill');
is($first->{status}, 201, "$name: the first client got the status");
ok(length($first->{body} // '') < 100000 && $first->{error},
   "$name: ... and part of the body, not ended")
    or diag('error: ' . ($first->{error} // 'none') . ', '
            . length($first->{body} // '') . ' bytes');
wait_state('t086-fcgi-keep-conn-kill', 3);
--- more_headers
Idempotency-Key: t086-fcgi-keep-conn-kill
--- request eval
["POST /fcgi-keep-conn/orders?size=100000&kill=1\nx", "POST /fcgi-keep-conn/orders?size=100000&kill=1\nx", "GET /__count?key=t086-fcgi-keep-conn-kill"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 18: FastCGI: a uWSGI worker killed mid-body, with a Content-Length: the first client had part of the body at most; two retries get 502 outcome-unknown, never a replay, and the app ran it once
--- init
ok(length(post_key('/fcgi/orders?size=100000&kill=1&length=1', 't086-fcgi-len')->{body} // '') < 100000,
   'FastCGI: a uWSGI worker killed mid-body, with a Content-Length: the first client had part of the body at most');
wait_state('t086-fcgi-len', 3);
--- more_headers
Idempotency-Key: t086-fcgi-len
--- request eval
["POST /fcgi/orders?size=100000&kill=1&length=1\nx", "POST /fcgi/orders?size=100000&kill=1&length=1\nx", "GET /__count?key=t086-fcgi-len"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["!Idempotent-Replayed", "!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10
