# A real PHP-FPM (scripts/services.sh php-fpm, backend/app.php) behind
# fastcgi_pass: the replay of a PHP answer byte for byte, one execution
# for concurrent duplicates in several PHP-FPM workers, and every way a
# PHP request can end without its answer (fastcgi_read_timeout, PHP-FPM's
# request_terminate_timeout before and after the first byte, a worker
# killed mid-body): the app never runs twice, and retries get 502
# outcome-unknown.  The app counts its executions across its workers.

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time);

use lib 't', 't/stress';
use IdemStress;
use AppServers;

IdemStress::begin_file(qw(PHPFPM_PORT PHPFPM_TERM_SOCKET));

my $P = port(85);
my $FPM = "127.0.0.1:$ENV{TEST_NGINX_PHPFPM_PORT}";
my $TERM = "unix:$ENV{TEST_NGINX_PHPFPM_TERM_SOCKET}";
my $tag = "php$$-" . int(time);
my $n = 0;

my $ngx = app_nginx('php-fpm', $P,
    [ '/orders', php => $FPM ],
    [ '/slow/', php => $FPM, "fastcgi_read_timeout 1s;\n" ],
    # PHP-FPM's pool "term": request_terminate_timeout 2s
    [ '/term/', php => $TERM ]);

sub fresh { return "$tag-" . shift() . '-' . ++$n }

{
    my $name = 'a binary body and two cookies';
    my $key = fresh('binary');
    my $uri = '/orders?binary=1&cookies=2';
    my $first = post($P, $uri, $key);

    is($first->{status}, 201, "$name: the first answer");
    is_deeply($first->{headers}{'set-cookie'},
              ['c1=v1; Path=/', 'c2=v2; Path=/'], "$name: ... its cookies");
    is(length $first->{body}, 576, "$name: ... its 576 bytes");
    check_replay($name, $P, $uri, $key, $first);
}

{
    my $name = 'a 300 KB body PHP flushes in two parts';
    my $key = fresh('large');
    my $uri = '/orders?size=300000&slow_body=300';
    my $first = post($P, $uri, $key);

    ok($first->{status} == 201 && $first->{body} eq pattern(300000),
       "$name: the first answer");
    check_replay($name, $P, $uri, $key, $first);
}

{
    my $name = 'ten concurrent duplicates';
    my $key = fresh('race');
    my $uri = '/orders?delay=1000';
    my @r = http_many([ map { post($P, $uri, $key, spec => 1) } 1 .. 10 ],
                      timeout => 30);

    is(scalar(grep { ($_->{status} // 0) == 201 } @r), 10,
       "$name: all get 201 (the nine wait for the first)");
    is(scalar(grep { ($_->{body} // '') eq ($r[0]{body} // '-') } @r), 10,
       "$name: ... with the same body");
    is(scalar(grep { IdemStress::hdr($_, 'Idempotent-Replayed') } @r), 9,
       "$name: ... nine as replays");
    is(app_count($P, $key), 1, "$name: executed once");
}

{
    my $name = 'fastcgi_read_timeout';
    my $key = fresh('read-timeout');
    my $uri = '/slow/orders?delay=2500';

    is(post($P, $uri, $key)->{status}, 504, "$name: the first client: 504");
    check_unknown($name, $P, $uri, $key);
}

{
    my $name = 'request_terminate_timeout before the first byte';
    my $key = fresh('term-header');
    my $uri = '/term/orders?delay=6000';

    is(post($P, $uri, $key)->{status}, 502, "$name: the first client: 502");
    check_unknown($name, $P, $uri, $key);
    like(IdemStress::read_file("$IdemStress::BUILD/services/php-fpm/php-fpm.log"),
         qr/\[pool term\] child \d+, script '[^']*app\.php' \(request: "POST \/term\/orders\?delay=6000"\) execution timed out/,
         "$name: PHP-FPM ended it");
}

{
    my $name = 'request_terminate_timeout mid-body';
    my $key = fresh('term-body');
    my $uri = '/term/orders?size=100000&slow_body=6000';
    my $first = post($P, $uri, $key);

    ok(length($first->{body} // '') < 100000,
       "$name: the first client had part of the body at most");
    check_unknown($name, $P, $uri, $key);
}

{
    my $name = 'a PHP-FPM worker killed mid-body';
    my $key = fresh('kill');
    my $uri = '/orders?size=100000&kill=1';
    my $first = post($P, $uri, $key);

    ok(length($first->{body} // '') < 100000,
       "$name: the first client had part of the body at most");
    check_unknown($name, $P, $uri, $key);
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in error.log');

done_testing();
