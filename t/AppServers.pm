# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

package AppServers;

# The real application servers of the suite (scripts/services.sh php-fpm
# and uwsgi, running backend/app.php and backend/wsgi.py) behind the
# Test::Nginx server of t/085, t/086 and t/130: the locations that pass to
# them, their apps' execution counts, and the checks of a first answer
# and its retry that a block's --- init makes (the block's own requests
# then repeat the retry and read the count).

use strict;
use warnings;

use Exporter ();
our @ISA = ('Exporter');
our @EXPORT = qw(app_location count_location app_count app_retry
                 check_replay first_binary first_large race pattern);

use Test::More;
use Time::HiRes qw(sleep);
use IdemStress ();
use IdemTest ();

# Test::Nginx evaluates "--- init" code in package Test::Nginx::Util:
# the helpers are callable there too, as IdemTest's are
sub import {
    my $class = shift;

    __PACKAGE__->export_to_level(1, $class, @_ ? @_ : @EXPORT);

    no strict 'refs';
    for my $f (@EXPORT) {
        *{"Test::Nginx::Util::$f"} = \&{$f};
    }
}

# what passes a request to each server
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

# the app's executions of $key
sub app_count {
    my ($key) = @_;

    my $r = IdemStress::http_one(port => IdemTest::port(), method => 'GET',
                                 uri => '/__count?key='
                                        . IdemStress::pct_encode($key));
    die "/__count: " . ($r->{error} // $r->{status}) . "\n"
        unless ($r->{status} // 0) == 200;
    return $r->{body} + 0;
}

# the same request again, until it is not a 409
sub app_retry {
    my ($uri, $key) = @_;
    my $r;

    for (1 .. 40) {
        $r = IdemTest::post_key($uri, $key);
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
    my ($name, $uri, $key, $first) = @_;

    my $r = app_retry($uri, $key);

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
    is(app_count($key), 1, "$name: executed once");
}

# What every server must do, one check each (the locations' paths start
# with $prefix, none: /orders).  A binary body with two cookies: the
# first answer, and its replay
sub first_binary {
    my ($key, $prefix) = @_;
    my $uri = ($prefix // '') . '/orders?binary=1&cookies=2';
    my $name = 'a binary body and two cookies'
             . ($prefix ? " ($prefix)" : '');
    my $first = IdemTest::post_key($uri, $key);

    is($first->{status}, 201, "$name: the first answer");
    is_deeply($first->{headers}{'set-cookie'},
              ['c1=v1; Path=/', 'c2=v2; Path=/'], "$name: ... its cookies");
    is(length $first->{body}, 576, "$name: ... its 576 bytes");
    check_replay($name, $uri, $key, $first);
}

# a 300 KB body in two parts: the first answer, and its replay
sub first_large {
    my ($key, $prefix) = @_;
    my $uri = ($prefix // '') . '/orders?size=300000&slow_body=300';
    my $name = 'a 300 KB body in two parts' . ($prefix ? " ($prefix)" : '');
    my $first = IdemTest::post_key($uri, $key);

    ok($first->{status} == 201 && $first->{body} eq pattern(300000),
       "$name: the first answer");
    check_replay($name, $uri, $key, $first);
}

# ten concurrent duplicates run once: all get 201 with the same body,
# nine as replays
sub race {
    my ($key, $prefix) = @_;
    my $uri = ($prefix // '') . '/orders?delay=1000';
    my $name = 'ten concurrent duplicates' . ($prefix ? " ($prefix)" : '');
    my @r = IdemStress::http_many(
        [ map { IdemTest::post_key($uri, $key, spec => 1) } 1 .. 10 ],
        timeout => 30);

    is(scalar(grep { ($_->{status} // 0) == 201 } @r), 10,
       "$name: all get 201 (the nine wait for the first)");
    is(scalar(grep { ($_->{body} // '') eq ($r[0]{body} // '-') } @r), 10,
       "$name: ... with the same body");
    is(scalar(grep { IdemStress::hdr($_, 'Idempotent-Replayed') } @r), 9,
       "$name: ... nine as replays");
}

1;
