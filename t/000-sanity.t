# Sanity checks of the test scaffold itself, with core nginx only (no
# module, no external backend): what the suite relies on in OpenResty's
# Test::Nginx::Socket.

use lib 't';
use Test::Nginx::Socket;
use Reaper ();

# the mocked backend's port, derived from the Test::Nginx port (19841 for
# the default 1984) so that runs on other ports do not meet
our $MOCK = 10 * ($ENV{TEST_NGINX_SERVER_PORT} || $ENV{TEST_NGINX_PORT} || 1984) + 1;

repeat_each(1);

# 2 tests (status + one more) for every block, plus the blocks that check more
plan tests => repeat_each() * (blocks() * 2 + 18);

no_shuffle();
run_tests();

__DATA__

=== TEST 1: return 200 with a body
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]
[alert]



=== TEST 2: response headers, present and absent; shutdown log
--- config
    location /t {
        add_header X-Foo bar;
        return 200 "ok\n";
    }
--- request
GET /t
--- response_headers
X-Foo: bar
Content-Type: text/plain
!X-Absent
--- response_body
ok
--- shutdown_error_log
(SIGQUIT) received



=== TEST 3: a POST body is sent with its Content-Length, with more_headers
--- config
    location /t {
        return 200 "$request_method $content_length $http_x_foo $http_x_bar\n";
    }
--- request
POST /t
hello body
--- more_headers
X-Foo: foo
X-Bar: bar
--- response_body
POST 10 foo bar



=== TEST 4: pipelined requests share one keep-alive connection
--- config
    location /a {
        return 200 "a\n";
    }
    location /b {
        return 200 "b $connection_requests\n";
    }
--- pipelined_requests eval
["GET /a", "GET /b"]
--- response_body eval
["a\n", "b 2\n"]



=== TEST 5: several requests, each checked on its own
--- config
    location /t {
        return 200 "ok\n";
    }
--- request eval
["GET /t", "GET /missing"]
--- error_code eval
[200, 404]
--- response_body_like eval
["^ok\n\$", "404 Not Found"]



=== TEST 6: the debug log is searched by error_log
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- error_log
http finalize request
[debug]
--- no_error_log
[error]



=== TEST 7: a chunked response is decoded
--- config
    location /t {
        sub_filter 'a' 'b';
        sub_filter_types *;
        sub_filter_once off;
        return 200 "aaa\n";
    }
--- request
GET /t
--- response_headers
Transfer-Encoding: chunked
!Content-Length
--- response_body
bbb



=== TEST 8: raw_request is sent as it is
--- config
    location /t {
        return 200 "$server_protocol\n";
    }
--- raw_request eval
"GET /t HTTP/1.0\r\nHost: localhost\r\n\r\n"
--- response_body
HTTP/1.0



=== TEST 9: HEAD has no body
--- config
    location /t {
        return 200 "ok\n";
    }
--- request
HEAD /t
--- response_headers
Content-Length: 3
--- response_body



=== TEST 10: a backend mocked by tcp_listen
--- config eval
# the request line and headers set here, not left to nginx's defaults
# (HTTP/1.1 and no Connection header from 1.29.7 on)
"    location /t {
        proxy_pass http://127.0.0.1:$::MOCK;
        proxy_http_version 1.0;
        proxy_set_header Host \$proxy_host;
        proxy_set_header Connection close;
    }
"
--- request
GET /t
--- tcp_listen eval
$::MOCK
--- tcp_query eval
"GET /t HTTP/1.0\r\nHost: 127.0.0.1:$::MOCK\r\nConnection: close\r\n\r\n"
--- tcp_reply eval
"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Backend: yes\r\n\r\nhello"
--- error_code: 201
--- response_headers
X-Backend: yes
--- response_body chomp
hello



=== TEST 11: user_files are served from the html directory
--- config
--- user_files
>>> hello.txt
hello world
--- request
GET /hello.txt
--- response_body
hello world



=== TEST 12: init runs before the request
--- config
--- init
open my $fh, '>', "$ENV{TEST_NGINX_SERVER_ROOT}/html/init.txt" or die $!;
print $fh "from init\n";
close $fh;
--- request
GET /init.txt
--- response_body
from init



=== TEST 13: a bad directive: nginx must die with [emerg]
--- config
    location /t {
        no_such_directive on;
    }
--- must_die
--- error_log
[emerg]
unknown directive "no_such_directive"
