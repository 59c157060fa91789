# A response the store cannot take is still recorded as executed: a
# record larger than the server's max_allowed_packet falls back at once to
# the small "executed, not stored" update, so retries get 410 and the
# operation never runs twice.  Both ways are covered: the record checked
# against max_allowed_packet before it is sent (over 1 MiB of statement),
# and the server's refusal of a smaller one (the record is sent as it is,
# bound to a prepared statement, so 600 kB is over the 512 kB limit).

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file('MYSQL_SOCKET');

my $P = port(161);
my $tag = "u$$-" . int(time);
my ($ngx, $saved);

sub root_sql {
    chomp(my $out = IdemStress::sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_));
    return $out;
}

END {
    $ngx->stop if $ngx;
    root_sql("SET GLOBAL max_allowed_packet = $saved") if $saved;
}

$saved = root_sql('SELECT @@global.max_allowed_packet');

# the module's connections are all made after this
root_sql('SET GLOBAL max_allowed_packet = 524288');

$ngx = IdemStress::Nginx->start(name => 'unstorable', port => $P,
    workers => 1,
    http => store_line('main', $ENV{TEST_NGINX_MYSQL_PORT}, pool => 4)
          . server_block($P, <<"SERVER"));
        location /orders {
            idempotency main;
            idempotency_max_response_size 8m;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }
SERVER

for my $case ([ 'checked before it is sent', 1048576 ],
              [ 'refused by the server', 600000 ])
{
    my ($how, $size) = @$case;
    my $name = "a $size-byte response over max_allowed_packet ($how)";
    my $key = "$tag-$size";
    my $uri = "/orders?size=$size";

    my $r = post($P, $uri, $key);
    is($r->{status}, 201, "$name: the client gets the response");
    is(length($r->{body} // ''), $size, "$name: ... all of it");

    for my $i (1, 2) {
        $r = post($P, $uri, $key);
        is($r->{status}, 410, "$name: retry $i gets 410");
        like($r->{body} // '', qr/response-not-stored/,
             "$name: ... response-not-stored");
    }

    is(backend_count($key), 1, "$name: executed once");
}

# ------------------------------------------------------------------------
# responses that each fit under the limit, completed at about the same
# moment: completions that share a statement must not add up to more than
# the limit (design.md, "Batches"), so every one is stored and replayed

my @many = map { "$tag-many$_" } 1 .. 8;
my $many_uri = '/orders?size=200000&delay=300';
my $upd0 = root_sql("SHOW GLOBAL STATUS LIKE 'Com_update'");
my @res = http_many([ map { { port => $P, method => 'POST', uri => $many_uri,
                              key => $_, body => 'x' } } @many ],
                    timeout => 60);
my $upd1 = root_sql("SHOW GLOBAL STATUS LIKE 'Com_update'");
s/.*\t// for $upd0, $upd1;
note('8 completions of 200000-byte records: ' . ($upd1 - $upd0)
     . ' UPDATE statements');
is(scalar(grep { $_->{status} == 201
                 && length($_->{body} // '') == 200000 } @res), 8,
   '8 concurrent 200000-byte responses: each client gets all of it');

@res = http_many([ map { { port => $P, method => 'POST', uri => $many_uri,
                           key => $_, body => 'x' } } @many ],
                 timeout => 60);
is(scalar(grep { $_->{status} == 201
                 && (IdemStress::hdr($_, 'X-Idem') // '') eq 'replay'
                 && length($_->{body} // '') == 200000 } @res), 8,
   '... each retry gets it replayed (stored, not 410)');
is(scalar(grep { backend_count($_) != 1 } @many), 0,
   '... each executed once');

my $log = $ngx->error_log;
like($log, qr/cannot be stored: larger than the server's max_allowed_packet; recorded as executed/,
     'the error log says the record was over max_allowed_packet');
like($log, qr/cannot be stored: .*(max_allowed_packet|packet).*; recorded as executed/i,
     'the error log says the server refused the record');
unlike($log, qr/storing the response of key .* retrying|could not be stored/,
       'the record was not retried: the fallback was written at once');
is_deeply([ $ngx->crashes ], [], 'no worker crashed');

done_testing();
