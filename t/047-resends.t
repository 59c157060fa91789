# nginx's own resends of a claimed request.  nginx gives a failed attempt
# to the next server (proxy_next_upstream error timeout, the default) and
# holds back only POST, LOCK and PATCH once the request was sent; a cached
# keepalive connection that fails gets one try more; an error_page can
# name a location that proxies again.  Once a byte of a claimed request
# was sent, a failure is an unknown outcome whatever the method: one
# execution, counted by the backend, and retries get 502 outcome-unknown.
# An attempt that sent nothing (connect refused) still fails over.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;

our $METHODS = 'POST PUT PATCH DELETE';

# a second nginx server that the upstreams below can name: /fast/ proxies
# to the backend's /orders without the query (no delay=); /drop/ lets the
# backend run the request, then closes the connection without an answer
sub helper_server {
    my $p = IdemTest::port() + 1;

    return <<"END";
server {
    listen 127.0.0.1:$p;
    location /orders {
        rewrite ^ /orders? break;
        proxy_pass http://backend;
    }
    location /ka/ {
        proxy_pass http://backend/orders;
        proxy_read_timeout 500ms;
        error_page 504 = \@drop;
    }
    location \@drop {
        return 444;
    }
}
END
}

sub upstreams {
    my $b = '127.0.0.1:$TEST_NGINX_BACKEND_PORT';
    my $h = '127.0.0.1:' . (IdemTest::port() + 1);

    return IdemTest::store_config() . helper_server() . <<"END";
upstream two {
    server $b;
    server $b;
}
upstream fast_backup {
    server $b;
    server $h backup;
}
upstream refused_first {
    server 127.0.0.1:1;
    server $b backup;
}
upstream ka {
    server $h;
    keepalive 4;
}
upstream fcgi_two {
    server 127.0.0.1:\$TEST_NGINX_PHPFPM_PORT;
    server 127.0.0.1:\$TEST_NGINX_PHPFPM_PORT;
}
END
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: PUT, two servers, a read timeout: nginx does not resend it; one execution, the retry gets outcome-unknown
--- http_config eval: main::upstreams()
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_pass => 'http://two', proxy_read_timeout => '1s',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t047-1
--- request eval
["PUT /orders?delay=2000\nx", "PUT /orders?delay=2000\nx", "GET /count?key=t047-1"]
--- error_code eval
[504, 502, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\nContent-Type: application/problem+json\n!Idempotent-Replayed", ""]
--- response_body_like eval
['504 Gateway Time-out', '^\{"type":"urn:ngx-idempotency:problem:outcome-unknown","title":"Outcome unknown","status":502,', '^1$']
--- timeout: 10



=== TEST 1b: the log says why it was not sent to the other server
--- http_config eval: main::upstreams()
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_pass => 'http://two', proxy_read_timeout => '1s')
--- more_headers
Idempotency-Key: t047-1b
--- request
PUT /orders?delay=2000
x
--- error_code: 504
--- error_log
idempotency: key 
was sent upstream and no answer came back: it is not sent to another server
--- timeout: 10



=== TEST 2: DELETE, a backup server that answers at once: the first server's timeout is not replaced by the second's answer
--- http_config eval: main::upstreams()
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_pass => 'http://fast_backup', proxy_read_timeout => '1s',
    add_header => 'X-Idem', count => 1)
--- more_headers
Idempotency-Key: t047-2
--- request eval
["DELETE /orders?delay=2000\nx", "DELETE /orders?delay=2000\nx", "GET /count?key=t047-2"]
--- error_code eval
[504, 502, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\n!Idempotent-Replayed", ""]
--- response_body_like eval
['504 Gateway Time-out', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 3: PUT over a keepalive connection that the server closes after it ran the request: no try more on a new connection
--- http_config eval: main::upstreams()
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_pass => 'http://ka/ka/', proxy_http_version => '1.1',
    proxy_set_header => 'Connection ""', add_header => 'X-Idem', count => 1)
. q{
    location = /warm {
        proxy_pass http://ka/orders;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
    }
}
--- init
# a keepalive connection to the helper server, cached in the one worker
my $r = http_req(method => 'GET', uri => '/warm');
is($r->{status}, 200, 'the keepalive connection is warm');
--- more_headers
Idempotency-Key: t047-3
--- request eval
["PUT /orders?delay=3000\nx", "PUT /orders?delay=3000\nx", "GET /count?key=t047-3"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: unknown\n!Idempotent-Replayed", ""]
--- response_body_like eval
['502 Bad Gateway', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 4: error_page 502 504 = @backup after a sent attempt timed out: @backup does not run it again; the first client gets outcome-unknown too
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_read_timeout => '1s', error_page => '502 504 = @backup',
    add_header => 'X-Idem', count => 1)
. q{
    location @backup {
        proxy_pass http://backend;
    }
}
--- more_headers
Idempotency-Key: t047-4
--- request eval
["PUT /orders?delay=2000\nx", "PUT /orders?delay=2000\nx", "GET /count?key=t047-4"]
--- error_code eval
[502, 502, 200]
--- response_headers eval
["Content-Type: application/problem+json\n!Idempotent-Replayed", "X-Idem: unknown\nContent-Type: application/problem+json\n!Idempotent-Replayed", ""]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 4b: the log says why @backup did not forward it
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_read_timeout => '1s', error_page => '502 504 = @backup')
. q{
    location @backup {
        proxy_pass http://backend;
    }
}
--- more_headers
Idempotency-Key: t047-4b
--- request
PUT /orders?delay=2000
x
--- error_code: 502
--- error_log
was sent upstream and no answer came back: location "@backup" does not forward it again
its outcome is unknown, and it is not executed again
--- timeout: 10



=== TEST 5: the same for POST, with @backup's proxy_pass to an address (an implicit upstream)
--- config eval
IdemTest::orders_location(proxy_read_timeout => '1s',
    error_page => '504 = @backup', count => 1)
. q{
    location @backup {
        proxy_pass http://127.0.0.1:$TEST_NGINX_BACKEND_PORT;
    }
}
--- more_headers
Idempotency-Key: t047-5
--- request eval
["POST /orders?delay=2000\nx", "POST /orders?delay=2000\nx", "GET /count?key=t047-5"]
--- error_code eval
[502, 502, 200]
--- response_body_like eval
['problem:outcome-unknown', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 6: an error_page to a static page after a sent attempt timed out is still served; the outcome is unknown
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_read_timeout => '1s', error_page => '504 /busy.json',
    count => 1)
. q{
    location = /busy.json {
        root html;
    }
}
--- user_files
>>> busy.json
{"busy":true}
--- more_headers
Idempotency-Key: t047-6
--- request eval
["PUT /orders?delay=2000\nx", "PUT /orders?delay=2000\nx", "GET /count?key=t047-6"]
--- error_code eval
[504, 502, 200]
--- response_body_like eval
['^\{"busy":true\}$', 'problem:outcome-unknown', '^1$']
--- timeout: 10



=== TEST 7: nothing was sent (connect refused): PUT still fails over, the answer is stored and replayed
--- http_config eval: main::upstreams()
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_pass => 'http://refused_first', add_header => 'X-Idem',
    count => 1)
--- more_headers
Idempotency-Key: t047-7
--- request eval
["PUT /orders\nx", "PUT /orders\nx", "GET /count?key=t047-7"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["X-Idem: new\n!Idempotent-Replayed", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t047-7","execution":1,"method":"PUT"', '"key":"t047-7","execution":1,"method":"PUT"', '^1$']



=== TEST 8: nothing was sent (connect refused) before error_page = @backup: @backup runs it, its answer is stored
--- config eval
IdemTest::orders_location(idempotency_methods => $main::METHODS,
    proxy_pass => 'http://127.0.0.1:1', error_page => '502 = @backup',
    add_header => 'X-Idem', count => 1)
. q{
    location @backup {
        proxy_pass http://backend;
    }
}
--- more_headers
Idempotency-Key: t047-8
--- request eval
["DELETE /orders\nx", "DELETE /orders\nx", "GET /count?key=t047-8"]
--- error_code eval
[200, 200, 200]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"t047-8","execution":1', '"key":"t047-8","execution":1', '^1$']



=== TEST 9: fastcgi_pass to PHP-FPM, DELETE, two servers, a read timeout: one execution, the retry gets outcome-unknown
--- http_config eval: main::upstreams()
--- config eval
my $app = "$IdemStress::ROOT/backend/app.php";
qq{
    location /fcgi {
        idempotency main;
        idempotency_methods POST PUT PATCH DELETE;
        fastcgi_pass fcgi_two;
        include /etc/nginx/fastcgi_params;
        fastcgi_param SCRIPT_FILENAME $app;
        fastcgi_read_timeout 1s;
    }
    location = /__count {
        fastcgi_pass fcgi_two;
        include /etc/nginx/fastcgi_params;
        fastcgi_param SCRIPT_FILENAME $app;
    }
}
--- more_headers
Idempotency-Key: t047-9
--- request eval
["DELETE /fcgi?delay=2000\nx", "DELETE /fcgi?delay=2000\nx", "GET /__count?key=t047-9"]
--- error_code eval
[504, 502, 200]
--- response_body_like eval
['504 Gateway Time-out', 'problem:outcome-unknown', '^1$']
--- timeout: 10
