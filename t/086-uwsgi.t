# A real uWSGI (scripts/services.sh uwsgi, backend/wsgi.py) behind
# uwsgi_pass: the replay of a WSGI answer byte for byte, one execution for
# concurrent duplicates in several uWSGI workers, and the ways a request
# can end without its answer (uwsgi_read_timeout, uWSGI's harakiri before
# and after the first byte, a worker killed mid-body): the app never runs
# twice, and retries get 502 outcome-unknown.  The uwsgi protocol has no
# end of its own: a body without Content-Length ends with the connection,
# so a worker that dies in the middle of one ends it as well as a worker
# that finished (the last block shows what that means).

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time);

use lib 't', 't/stress';
use IdemStress;
use AppServers;

IdemStress::begin_file(qw(UWSGI_PORT));

my $P = port(86);
my $UWSGI = "127.0.0.1:$ENV{TEST_NGINX_UWSGI_PORT}";
my $tag = "wsgi$$-" . int(time);
my $n = 0;

my $ngx = app_nginx('uwsgi', $P,
    [ '/orders', uwsgi => $UWSGI ],
    [ '/slow/', uwsgi => $UWSGI, "uwsgi_read_timeout 1s;\n" ]);

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
    my $name = 'a 300 KB body in two parts';
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
    my $name = 'uwsgi_read_timeout';
    my $key = fresh('read-timeout');
    my $uri = '/slow/orders?delay=2500';

    is(post($P, $uri, $key)->{status}, 504, "$name: the first client: 504");
    check_unknown($name, $P, $uri, $key);
}

{
    my $name = 'harakiri before the first byte';
    my $key = fresh('harakiri-header');
    my $uri = '/orders?harakiri=1&delay=6000';

    is(post($P, $uri, $key)->{status}, 502, "$name: the first client: 502");
    check_unknown($name, $P, $uri, $key);
    like(IdemStress::read_file("$IdemStress::BUILD/services/uwsgi/uwsgi.log"),
         qr/HARAKIRI ON WORKER/, "$name: uWSGI's master killed the worker");
}

{
    my $name = 'harakiri mid-body, with a Content-Length';
    my $key = fresh('harakiri-body');
    my $uri = '/orders?harakiri=1&size=100000&slow_body=6000&length=1';
    my $first = post($P, $uri, $key);

    ok(length($first->{body} // '') < 100000,
       "$name: the first client had part of the body at most");
    check_unknown($name, $P, $uri, $key);
}

{
    my $name = 'a uWSGI worker killed mid-body, with a Content-Length';
    my $key = fresh('kill');
    my $uri = '/orders?size=100000&kill=1&length=1';
    my $first = post($P, $uri, $key);

    ok(length($first->{body} // '') < 100000,
       "$name: the first client had part of the body at most");
    check_unknown($name, $P, $uri, $key);
}

{
    # what nginx makes of it: the response ended with the connection, as
    # any answer without a length does; the first client got a cleanly
    # ended half, and the retry gets the same half (docs/reliability.md,
    # "Backends")
    my $name = 'a uWSGI worker killed mid-body, without a Content-Length';
    my $key = fresh('kill-nolength');
    my $uri = '/orders?size=100000&kill=1';
    my $first = post($P, $uri, $key);

    ok($first->{status} == 201 && !$first->{error}
       && $first->{body} eq pattern(50000),
       "$name: the first client got half the body, cleanly ended");
    check_replay($name, $P, $uri, $key, $first);
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in error.log');

done_testing();
