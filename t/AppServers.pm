# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package AppServers;

# The real application servers of the suite (scripts/services.sh php-fpm
# and uwsgi, running backend/app.php and backend/wsgi.py) behind one
# nginx of IdemStress: the locations that pass to them, their apps'
# execution counts, and the checks t/085 and t/086 make of a retry.

use strict;
use warnings;

use Exporter ();
our @ISA = ('Exporter');
our @EXPORT = qw(app_nginx app_count app_retry check_replay check_unknown
                 check_answers check_cut pattern app_location count_location);

use Test::More;
use Time::HiRes qw(sleep);
use IdemStress;

# what passes a request to each server ($p: a location's own lines)
my %PASS = (
    php => sub {
        my ($where) = @_;
        return "fastcgi_pass $where;\n"
             . "include /etc/nginx/fastcgi_params;\n"
             . "fastcgi_param SCRIPT_FILENAME $IdemStress::ROOT/backend/app.php;\n";
    },
    uwsgi => sub {
        my ($where) = @_;
        return "uwsgi_pass $where;\ninclude /etc/nginx/uwsgi_params;\n";
    },
    # the WSGI app on uWSGI's FastCGI socket: the path is its PATH_INFO
    fcgi => sub {
        my ($where) = @_;
        return "fastcgi_pass $where;\n"
             . "include /etc/nginx/fastcgi_params;\n"
             . "fastcgi_param SCRIPT_NAME \"\";\n"
             . "fastcgi_param PATH_INFO \$uri;\n";
    },
);

my $ngx;

# A protected location at $path that passes to the server of $kind (php,
# uwsgi, fcgi) at $where (host:port or unix:path), with $lines more: held
# duplicates wait up to 10 s
sub app_location {
    my ($path, $kind, $where, $lines) = @_;

    return "    location $path {\n        idempotency main;\n"
         . "        idempotency_wait 10s;\n"
         . $PASS{$kind}->($where) . ($lines // '') . "    }\n";
}

# location = /__count: the app's count of the executions of ?key=
sub count_location {
    my ($kind, $where) = @_;

    return "    location = /__count {\n" . $PASS{$kind}->($where) . "    }\n";
}

# One nginx (1 worker) on $port with the store "main": for each
# [PATH, KIND, WHERE, LINES] a protected location that passes to the
# server at WHERE (host:port or unix:path), with LINES more; and
# location = /__count, the app's count of ?key=, on the first of them.
sub app_nginx {
    my ($name, $port, @locs) = @_;

    my $http = store_line('main', $ENV{TEST_NGINX_MYSQL_PORT}, pool => 8)
        . "server {\n    listen 127.0.0.1:$port;\n"
        . "    add_header X-Idem \$idempotency_status always;\n"
        . "    idempotency_max_response_size 8m;\n";

    $http .= app_location(@$_) for @locs;
    $http .= count_location($locs[0][1], $locs[0][2]) . "}\n";

    $ngx = IdemStress::Nginx->start(name => $name, port => $port,
                                    workers => 1, http => $http);
    return $ngx;
}

END { $ngx->stop if $ngx }

# the app's executions of $key
sub app_count {
    my ($port, $key) = @_;

    my $r = http_one(port => $port, method => 'GET',
                     uri => '/__count?key=' . IdemStress::pct_encode($key));
    die "/__count: " . ($r->{error} // $r->{status}) . "\n"
        unless ($r->{status} // 0) == 200;
    return $r->{body} + 0;
}

# the same request again, until it is not a 409
sub app_retry {
    my ($port, $uri, $key) = @_;
    my $r;

    for (1 .. 40) {
        $r = post($port, $uri, $key);
        last unless ($r->{status} // 0) == 409;
        sleep 0.25;
    }

    return $r;
}

# the body of size=N: byte i is i % 251
sub pattern {
    my ($len) = @_;
    my $unit = join '', map { chr } 0 .. 250;
    return substr($unit x (int($len / 251) + 1), 0, $len);
}

# the retry replays $first (status, every header the app sent, body)
sub check_replay {
    my ($name, $port, $uri, $key, $first) = @_;

    my $r = app_retry($port, $uri, $key);

    is($r->{status}, $first->{status}, "$name: the retry gets the status");
    is(IdemStress::hdr($r, 'Idempotent-Replayed'), 'true',
       "$name: ... as a replay");
    for my $h ('Content-Type', 'Location', 'X-Order-Id', 'Set-Cookie') {
        is_deeply($r->{headers}{lc $h}, $first->{headers}{lc $h},
                  "$name: ... with its $h header(s)");
    }
    ok(defined $r->{body} && $r->{body} eq $first->{body},
       "$name: ... and its body, byte for byte")
        or diag('got ' . length($r->{body} // '') . ' bytes, expected '
                . length($first->{body}));
    is(app_count($port, $key), 1, "$name: executed once");
}

# two retries get 502
# outcome-unknown, never a replay; the app ran it once
sub check_unknown {
    my ($name, $port, $uri, $key) = @_;

    for my $i (1, 2) {
        my $r = app_retry($port, $uri, $key);
        is($r->{status}, 502, "$name: retry $i gets 502");
        like($r->{body} // '', qr/problem:outcome-unknown/,
             "$name: ... outcome-unknown");
        ok(!defined IdemStress::hdr($r, 'Idempotent-Replayed'),
           "$name: ... not a replay");
    }
    is(app_count($port, $key), 1, "$name: executed once");
}

# what every server must do: replay a binary body with two cookies and a
# 300 KB body in two parts byte for byte, and run ten concurrent
# duplicates once; $fresh->(NAME) makes a new key; the locations' paths
# start with $prefix (none: /orders)
sub check_answers {
    my ($port, $fresh, $prefix) = @_;
    my $at = ($prefix // '') . '/orders';
    my $in = $prefix ? " ($prefix)" : '';

    my $name = "a binary body and two cookies$in";
    my $key = $fresh->('binary');
    my $uri = "$at?binary=1&cookies=2";
    my $first = post($port, $uri, $key);

    is($first->{status}, 201, "$name: the first answer");
    is_deeply($first->{headers}{'set-cookie'},
              ['c1=v1; Path=/', 'c2=v2; Path=/'], "$name: ... its cookies");
    is(length $first->{body}, 576, "$name: ... its 576 bytes");
    check_replay($name, $port, $uri, $key, $first);

    $name = "a 300 KB body in two parts$in";
    $key = $fresh->('large');
    $uri = "$at?size=300000&slow_body=300";
    $first = post($port, $uri, $key);

    ok($first->{status} == 201 && $first->{body} eq pattern(300000),
       "$name: the first answer");
    check_replay($name, $port, $uri, $key, $first);

    $name = "ten concurrent duplicates$in";
    $key = $fresh->('race');
    $uri = "$at?delay=1000";
    my @r = http_many([ map { post($port, $uri, $key, spec => 1) } 1 .. 10 ],
                      timeout => 30);

    is(scalar(grep { ($_->{status} // 0) == 201 } @r), 10,
       "$name: all get 201 (the nine wait for the first)");
    is(scalar(grep { ($_->{body} // '') eq ($r[0]{body} // '-') } @r), 10,
       "$name: ... with the same body");
    is(scalar(grep { IdemStress::hdr($_, 'Idempotent-Replayed') } @r), 9,
       "$name: ... nine as replays");
    is(app_count($port, $key), 1, "$name: executed once");
}

# a request whose answer is cut mid-body: its client had part of the body
# at most, and it is of unknown outcome
sub check_cut {
    my ($name, $port, $uri, $key) = @_;
    my $first = post($port, $uri, $key);

    ok(length($first->{body} // '') < 100000,
       "$name: the first client had part of the body at most");
    check_unknown($name, $port, $uri, $key);
}

1;
