# A client that goes away does not end a protected exchange: the upstream
# runs to its end, the module captures and stores the whole response, and
# the retry that is sure to come replays it.  Every case counts the
# backend's executions (exactly one) and compares the replayed body with
# what the backend sent.

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;
use lib 't';
use AppServers ();

IdemStress::begin_file();

my $P = port(131);
my $H2 = port(132);
my $SLOW = port(133);
my $FPM = $ENV{TEST_NGINX_PHPFPM_PORT};
my $MYSQL = $ENV{TEST_NGINX_MYSQL_PORT};
my $tag = "g$$-" . int(time);
my $n = 0;
my $ngx;

END { $ngx->stop if $ngx }

# the suite's PHP-FPM (backend/app.php), and its count of a key's
# executions at /__count
my $fcgi_loc = !$FPM ? '' : <<"LOC";
        location /fcgi {
            idempotency main;
            idempotency_wait 10s;
            fastcgi_pass 127.0.0.1:$FPM;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $IdemStress::ROOT/backend/app.php;
        }
        location = /__count {
            fastcgi_pass 127.0.0.1:$FPM;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $IdemStress::ROOT/backend/app.php;
        }
LOC

$ngx = IdemStress::Nginx->start(name => 'gone', port => $P,
                                workers => 1, http => store_line('main',
    $MYSQL, pool => 8) . <<"HTTP");
    upstream backend { server 127.0.0.1:$BACKEND_PORT; }

    server {
        listen 127.0.0.1:$P;
        @{[ IdemStress::listen_http2("127.0.0.1:$H2", ' ' x 8) ]}

        add_header X-Idem \$idempotency_status always;
        idempotency_max_response_size 8m;

        # a retry waits for the first request's end instead of 409;
        # what arrives is sent at once, however small
        location /orders {
            idempotency main;
            idempotency_wait 10s;
            postpone_output 0;
            proxy_pass http://backend;
        }

        location /unbuffered {
            idempotency main;
            idempotency_wait 10s;
            proxy_buffering off;
            postpone_output 0;
            proxy_pass http://backend/orders;
        }
$fcgi_loc
    }

    # a small socket buffer and small proxy buffers: what the client does
    # not read goes to a temp file
    server {
        listen 127.0.0.1:$SLOW sndbuf=16k;

        idempotency_max_response_size 8m;

        location /spill {
            idempotency main;
            idempotency_wait 10s;
            proxy_buffers 4 4k;
            proxy_busy_buffers_size 8k;
            proxy_pass http://backend/orders;
        }
    }
HTTP

sub fresh { return "$tag-" . shift() . '-' . ++$n }

sub replayed {
    return (IdemStress::hdr($_[0], 'Idempotent-Replayed') // '') eq 'true';
}

# the backend's body for size=N: byte i is i % 251
sub pattern {
    my ($len) = @_;
    my $unit = join '', map { chr } 0 .. 250;
    return substr($unit x (int($len / 251) + 1), 0, $len);
}

sub port_for { return $_[0] =~ m{^/spill} ? $SLOW : $P }

# curl as the client that leaves: returns "status bytes-received"
sub leaving_client {
    my ($uri, $key, @opt) = @_;

    my $port = port_for($uri);
    my $out = `curl -s -o /dev/null -w '%{http_code} %{size_download}' @opt -X POST -H 'Idempotency-Key: $key' --data-binary x 'http://127.0.0.1:$port$uri'`;
    return $out;
}

# the retry: the same request again, until it is not a 409
sub retry {
    my ($uri, $key) = @_;

    my $r;
    for (1 .. 40) {
        $r = http_one(port => port_for($uri), method => 'POST', uri => $uri,
                      key => $key, body => 'x', timeout => 30);
        last unless ($r->{status} // 0) == 409;
        sleep 0.25;
    }

    return $r;
}

sub check_replay {
    my ($name, $uri, $key, $body) = @_;

    my $r = retry($uri, $key);

    is($r->{status}, 201, "$name: the retry gets the first status");
    ok(replayed($r), "$name: ... as a replay")
        or diag('retry: ' . ($r->{error} // $r->{status}) . ' '
                . (IdemStress::hdr($r, 'X-Idem') // '-'));

    if (ref $body) {
        like($r->{body} // '', $body, "$name: ... of the first answer");
    } else {
        ok(defined $r->{body} && $r->{body} eq $body,
           "$name: ... with the whole body, byte for byte")
            or diag('got ' . length($r->{body} // '') . ' bytes, expected '
                    . length $body);
    }

    is($uri =~ m{^/fcgi} ? AppServers::app_count($P, $key)
                         : backend_count($key),
       1, "$name: executed once");
}

# ------------------------------------------------------------------------

{
    my $name = 'client gone before the status line';
    my $key = fresh('before');
    my $uri = '/orders?delay=1500';

    my $got = leaving_client($uri, $key, '--max-time', '0.5');
    like($got, qr/^000 0$/, "$name: the client got nothing");
    check_replay($name, $uri, $key, qr/"key":"\Q$key\E","execution":1,/);
}

{
    my $name = 'client gone mid-body (half of 64 KB, the rest 1.5 s later)';
    my $key = fresh('mid');
    my $uri = '/orders?size=65536&slow_body=1500';

    my $got = leaving_client($uri, $key, '--max-time', '0.5');
    ok($got =~ /^201 (\d+)$/ && $1 > 0 && $1 < 65536,
       "$name: the client had the status and part of the body")
        or diag("client: $got");
    check_replay($name, $uri, $key, pattern(65536));
}

{
    my $name = 'client gone while a 2 MB body streams through a temp file';
    my $key = fresh('spill');
    my $uri = '/spill?size=2097152&slow_body=1500';

    my $got = leaving_client($uri, $key, '--limit-rate', '16k',
                             '--max-time', '1');
    like($got, qr/^201 \d+$/, "$name: the client had the status");
    check_replay($name, $uri, $key, pattern(2097152));
    like($ngx->error_log, qr/buffered to a temporary file/,
         "$name: the response did go through a temp file");
}

{
    my $name = 'client gone mid-body (headers and 1 KB, the rest 1.5 s '
               . 'later), proxy_buffering off';
    my $key = fresh('unbuf');
    my $uri = '/unbuffered?size=2048&slow_body=1500';

    my $got = leaving_client($uri, $key, '--max-time', '0.5');
    like($got, qr/^201 1024$/, "$name: the client had the status and 1 KB");
    check_replay($name, $uri, $key, pattern(2048));
}

SKIP: {
    skip 'no PHP-FPM (TEST_NGINX_PHPFPM_PORT)', 8 unless $FPM;

    my $name = 'client gone before the status line, fastcgi_pass to PHP-FPM';
    my $key = fresh('fcgi');
    my $uri = '/fcgi?delay=1500';

    leaving_client($uri, $key, '--max-time', '0.5');
    check_replay($name, $uri, $key, qr/"key":"\Q$key\E","execution":1,/);

    $name = 'client gone mid-body, fastcgi_pass to PHP-FPM';
    $key = fresh('fcgi-mid');
    $uri = '/fcgi?size=200000&slow_body=1500';

    leaving_client($uri, $key, '--max-time', '0.5');
    check_replay($name, $uri, $key, pattern(200000));
}

SKIP: {
    skip 'node not found', 5 unless `node --version 2>/dev/null` =~ /^v/;

    my $name = 'HTTP/2 stream reset while the upstream works';
    my $key = fresh('h2');
    my $uri = '/orders?delay=1500';

    my $out = `node t/tools/h2-reset.js $H2 '$uri' $key x 500`;
    like($out, qr/^reset/, "$name: the client reset its stream");
    check_replay($name, $uri, $key, qr/"key":"\Q$key\E","execution":1,/);
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in error.log');

done_testing();
