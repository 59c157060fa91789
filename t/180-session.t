# The module sets its session on every new connection and trusts none of
# the server's defaults: against a MariaDB whose defaults are hostile
# (autocommit off, NO_BACKSLASH_ESCAPES and ANSI_QUOTES, a gbk client
# character set, and an init_connect that sets them again for the
# module's user), claims commit, a binary response is stored and replayed
# byte for byte, and a duplicate on another connection sees the first.

use strict;
use warnings;

use Test::More;
use Time::HiRes qw(time);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();

my $P = port(181);
my $tag = "s$$-" . int(time);
my ($db, $ngx);

END {
    $ngx->stop if $ngx;
    $db->stop if $db;
}

$db = IdemStress::DB->new(name => 'hostiledb', port => port(307), args => [
    '--autocommit=0',
    '--sql-mode=NO_BACKSLASH_ESCAPES,ANSI_QUOTES,PIPES_AS_CONCAT',
    '--character-set-server=gbk', '--collation-server=gbk_chinese_ci',
    "--init-connect=SET NAMES gbk; SET autocommit = 0;"
    . " SET sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES'",
]);
$db->start(fresh => 1);

like($db->root_sql("SELECT \@\@global.autocommit, \@\@global.sql_mode,"
                   . " \@\@global.character_set_server, \@\@global.init_connect"),
     qr/^0\t(?=.*NO_BACKSLASH_ESCAPES)(?=.*ANSI_QUOTES)\S+\tgbk\tSET NAMES gbk/,
     'the server has hostile defaults');

$ngx = IdemStress::Nginx->start(name => 'session', port => $P, workers => 2,
    http => store_line('hostile', $db->{port}, pool => 4)
          . server_block($P, <<"SERVER"));
        location /orders {
            idempotency hostile;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }
SERVER

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

# every byte value, quotes and backslashes included, in the response
my $key = "$tag-binary";
my $r1 = post($P, '/orders?binary=1', $key);
is("$r1->{status} " . idem($r1), '201 new', 'the first request is executed');

my @dup = http_many([ map { { port => $P, method => 'POST',
                              uri => '/orders?binary=1', key => $key,
                              body => 'x' } } 1 .. 4 ]);
is(scalar(grep { $_->{status} == 201 && idem($_) eq 'replay' } @dup), 4,
   'duplicates on other connections are replayed (the claim and the '
   . 'completion were committed)');
ok(!grep({ $_->{body} ne $r1->{body} } @dup),
   'the replay is the response byte for byte');
is(backend_count($key), 1, 'executed once');

is($db->sql("SELECT state FROM idempotency_keys WHERE key_hash = X'"
            . key_hash_hex($key) . "'") =~ s/\s+//gr, '1',
   'another session sees the completed row');

# a key and a body with quotes, backslashes and a gbk lead byte
my $k2 = "$tag-quote'\\x";
my $a1 = post($P, '/orders', $k2, body => "it's a \\\"body\\\" \x{bf}\x{27}");
my $a2 = post($P, '/orders', $k2, body => "it's a \\\"body\\\" \x{bf}\x{27}");
is(idem($a1) . ' ' . idem($a2), 'new replay',
   'a key and a body with quotes and backslashes: new, then replay');
is(backend_count($k2), 1, '... executed once');

is_deeply([ $ngx->crashes ], [], 'no worker crashed');
unlike($ngx->error_log, qr/\[(alert|crit|emerg)\]|\[error\].*idempotency/,
       'no store error in error.log');

done_testing();
