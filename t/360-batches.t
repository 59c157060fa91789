# Requests whose claims, reads and completions share statements
# (docs/design.md, "Batches"), and the claim that starts with its READ
# once most keys exist ("Which statement first"): what the clients see is
# what they see one at a time: every key executed once, duplicates
# replayed or told 409, and the server counted fewer statements than
# requests.

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file('MYSQL_SOCKET');

my $P = port(361);
my $tag = "b$$-" . int(time);
my $SLOW = port(362);
my ($ngx, $slow);

END {
    kill 'KILL', $slow if $slow;
    $ngx->stop if $ngx;
}

# as root on the suite's server
sub root_sql { IdemStress::sql_root($ENV{TEST_NGINX_MYSQL_SOCKET}, @_) }

# the server's statement counters
sub counters {
    return IdemStress::server_status($ENV{TEST_NGINX_MYSQL_SOCKET},
                                     'Com_insert', 'Com_update');
}

# the store behind a relay that holds every packet 20 ms: a round trip
# takes at least 40 ms, so requests that come together wait for the two
# connections and share statements
$slow = IdemStress::tcp_proxy($SLOW, $ENV{TEST_NGINX_MYSQL_PORT}, 0.02);

# an account that may insert rows and complete them (its UPDATE reads
# key_hash and owner), but not read them: a claim's READ fails
my $db = $ENV{TEST_NGINX_MYSQL_DB} || 'idempotency';
root_sql("CREATE USER IF NOT EXISTS 'idem_noread'\@'127.0.0.1'"
         . " IDENTIFIED BY 'noread'");
root_sql("GRANT INSERT, UPDATE, DELETE ON $db.* TO"
         . " 'idem_noread'\@'127.0.0.1'");
root_sql("GRANT SELECT (key_hash, owner) ON $db.idempotency_keys TO"
         . " 'idem_noread'\@'127.0.0.1'");

# two connections for one worker
$ngx = IdemStress::Nginx->start(name => 'batches', port => $P, workers => 1,
    http => store_line('main', $SLOW, pool => 2, query_timeout => '10s')
          . store_line('noread', $ENV{TEST_NGINX_MYSQL_PORT},
                       user => 'idem_noread', password => 'noread',
                       purge => 'off')
          . server_block($P, <<"SERVER"));
        location /orders {
            idempotency main;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }

        location /noread {
            idempotency noread;
            idempotency_on_store_error pass;
            proxy_pass http://backend/orders;
            add_header X-Idem \$idempotency_status always;
        }
SERVER

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

# ------------------------------------------------------------------------
# 32 new keys, each sent twice, all at once

my @keys = map { "$tag-k$_" } 1 .. 32;
my $c0 = counters();
my @res = http_many([ map { my $q = post($P, '/orders?delay=500', $_,
                                         spec => 1);
                            ($q, { %$q }) } @keys ],
                    timeout => 60);
my $c1 = counters();

my %by;
$by{ $_->{error} ? "error $_->{error}" : "$_->{status} " . idem($_) }++
    for @res;
note('64 requests: ' . join ', ', map { "$_ x$by{$_}" } sort keys %by);

is(scalar(grep { !$_->{error} && ($_->{status} == 201
                                  || $_->{status} == 409) } @res),
   64, 'every request gets 201 or 409');
is($by{'201 new'} // 0, 32, 'one request of each key is forwarded');
is(scalar(grep { backend_count($_) != 1 } @keys), 0,
   'each key executed exactly once');

my %first;
for my $i (0 .. $#res) {
    my $r = $res[$i];
    $first{ $keys[int($i / 2)] } = $r->{body} if idem($r) eq 'new';
}

@res = http_many([ map { post($P, '/orders?delay=500', $_, spec => 1) }
                   @keys ], timeout => 60);
is(scalar(grep { $_->{status} == 201 && idem($_) eq 'replay' } @res), 32,
   'then each key is replayed');
is(scalar(grep { $res[$_]->{body} ne ($first{ $keys[$_] } // '') }
          0 .. $#keys),
   0, '... with the body of its first response');

my $ins = $c1->{Com_insert} - $c0->{Com_insert};
my $upd = $c1->{Com_update} - $c0->{Com_update};
note("claims of 64 requests: $ins INSERT statements; "
     . "32 completions: $upd UPDATE statements");
ok($ins < 32, "claims share INSERT statements ($ins for 64 requests)");
ok($upd < 32, "completions share UPDATE statements ($upd for 32)");

# ------------------------------------------------------------------------
# most claims find their key: a claim starts with its READ, and a new key
# is still claimed once

http_many([ map { post($P, '/orders', $keys[$_ % 32], spec => 1) } 1 .. 48 ],
          timeout => 30);

my $new = "$tag-after";
my $r = post($P, '/orders', $new);
is("$r->{status} " . idem($r), '201 new',
   'a new key after many duplicates: forwarded');
$r = post($P, '/orders', $new);
is("$r->{status} " . idem($r), '201 replay', '... then replayed');
$r = post($P, '/orders', $new, body => 'y');
is("$r->{status} " . idem($r), '422 mismatch',
   '... and a different body is refused');
is(backend_count($new), 1, '... executed once');

# ------------------------------------------------------------------------
# the claim of a key that exists fails after its INSERT was refused: with
# idempotency_on_store_error pass, it is still not forwarded

my $k = "$tag-noread";
$r = post($P, '/noread', $k);
is("$r->{status} " . idem($r), '201 new', 'pass: a new key is forwarded');
$r = post($P, '/noread', $k);
is($r->{status}, 503, '... its duplicate, whose READ fails, gets 503');
is(backend_count($k), 1, '... and is not forwarded: executed once');
like($ngx->error_log, qr/claim of key \Q@{[ key_id($k) ]}\E failed: .*rejecting the request \(the key exists: never passed\)/,
     '... the log says why');

unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in the log');
is_deeply([ $ngx->crashes ], [], 'no worker crashed');

done_testing();
