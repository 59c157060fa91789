# A real uWSGI (scripts/services.sh uwsgi, backend/wsgi.py) behind
# uwsgi_pass: the replay of a WSGI answer byte for byte, one execution for
# concurrent duplicates in several uWSGI workers, and the ways a request
# can end without its answer (uwsgi_read_timeout, uWSGI's harakiri before
# and after the first byte, a worker killed mid-body): the app never runs
# twice, and retries get 502 outcome-unknown.  The uwsgi protocol has no
# end of its own: a body without Content-Length ends with the connection,
# so a worker that dies in the middle of one ends it as well as a worker
# that finished (the uwsgi block at the end shows what that means).
#
# The same app on uWSGI's FastCGI socket behind fastcgi_pass: FastCGI ends
# every answer with records of its own, and uWSGI reads the whole request,
# so a worker killed mid-answer closes the connection cleanly, which nginx
# takes for the end without fastcgi_keep_conn or without buffering.  The
# module sees that the end records never came: the first client's response
# is not ended, and retries get 502 outcome-unknown; answers that ended
# are replayed, buffered or not.

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
my $FCGI = "unix:$IdemStress::BUILD/services/uwsgi/sock/fcgi.sock";
my $tag = "wsgi$$-" . int(time);
my $n = 0;

my $ngx = app_nginx('uwsgi', $P,
    [ '/orders', uwsgi => $UWSGI ],
    [ '/slow/', uwsgi => $UWSGI, "uwsgi_read_timeout 1s;\n" ],
    [ '/fcgi/', fcgi => $FCGI ],
    [ '/fcgi-unbuffered/', fcgi => $FCGI, "fastcgi_buffering off;\n" ],
    [ '/fcgi-keep-conn/', fcgi => $FCGI, "fastcgi_keep_conn on;\n" ]);

sub fresh { return "$tag-" . shift() . '-' . ++$n }

check_answers($P, \&fresh);

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

check_cut('harakiri mid-body, with a Content-Length', $P,
          '/orders?harakiri=1&size=100000&slow_body=6000&length=1', fresh('harakiri-body'));

check_cut('a uWSGI worker killed mid-body, with a Content-Length', $P,
          '/orders?size=100000&kill=1&length=1', fresh('kill'));

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

check_answers($P, \&fresh, '/fcgi');
check_answers($P, \&fresh, '/fcgi-unbuffered');

for my $loc ('/fcgi', '/fcgi-unbuffered', '/fcgi-keep-conn') {
    my $name = "FastCGI ($loc): a uWSGI worker killed mid-body, "
             . 'without a Content-Length';
    my $key = fresh('fcgi-kill');
    my $uri = "$loc/orders?size=100000&kill=1";
    my $first = post($P, $uri, $key);

    is($first->{status}, 201, "$name: the first client got the status");
    ok(length($first->{body} // '') < 100000 && $first->{error},
       "$name: ... and part of the body, not ended")
        or diag('error: ' . ($first->{error} // 'none') . ', '
                . length($first->{body} // '') . ' bytes');
    check_unknown($name, $P, $uri, $key);
}

check_cut('FastCGI: a uWSGI worker killed mid-body, with a Content-Length',
          $P, '/fcgi/orders?size=100000&kill=1&length=1', fresh('fcgi-len'));

like($ngx->error_log,
     qr/closed the connection before it ended the request; its outcome/,
     'FastCGI: the error log says why the outcome is unknown');

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in error.log');

done_testing();
