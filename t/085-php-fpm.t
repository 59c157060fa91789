# A real PHP-FPM (scripts/services.sh php-fpm, backend/app.php) behind
# fastcgi_pass: the replay of a PHP answer byte for byte, one execution
# for concurrent duplicates in several PHP-FPM workers, and every way a
# PHP request can end without its answer (fastcgi_read_timeout, PHP-FPM's
# request_terminate_timeout before and after the first byte, a worker
# killed mid-body): the app never runs twice, and retries get 502
# outcome-unknown.  Answers are replayed buffered, unbuffered and with
# fastcgi_keep_conn.  The app counts its executions across its workers.

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
    [ '/term/', php => $TERM ],
    # the end of an answer is FastCGI's records, noted another way
    # unbuffered, and with the connection kept
    [ '/unbuffered/', php => $FPM, "fastcgi_buffering off;\n" ],
    [ '/keep-conn/', php => $FPM, "fastcgi_keep_conn on;\n" ]);

sub fresh { return "$tag-" . shift() . '-' . ++$n }

check_answers($P, \&fresh);
check_answers($P, \&fresh, '/unbuffered');
check_answers($P, \&fresh, '/keep-conn');

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

check_cut('request_terminate_timeout mid-body', $P,
          '/term/orders?size=100000&slow_body=6000', fresh('term-body'));

check_cut('a PHP-FPM worker killed mid-body', $P,
          '/orders?size=100000&kill=1', fresh('kill'));

check_cut('a PHP-FPM worker killed mid-body, unbuffered', $P,
          '/unbuffered/orders?size=100000&kill=1', fresh('kill-unbuffered'));

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in error.log');

done_testing();
