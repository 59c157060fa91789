# The module sets its session on every new connection and trusts none of
# the server's defaults: against a MariaDB whose defaults are hostile
# (autocommit off, NO_BACKSLASH_ESCAPES and ANSI_QUOTES, a gbk client
# character set, and an init_connect that sets them again for the
# module's user), claims commit, a binary response is stored and replayed
# byte for byte, and a duplicate on another connection sees the first.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;

IdemStress::begin_file();
plan 'no_plan';

# the hostile server, for the whole file; stopped by this process only
our $OWNER = $$;
our $DB = IdemStress::DB->new(name => 'hostiledb',
                              port => IdemTest::extra_port(307), args => [
    '--autocommit=0',
    '--sql-mode=NO_BACKSLASH_ESCAPES,ANSI_QUOTES,PIPES_AS_CONCAT',
    '--character-set-server=gbk', '--collation-server=gbk_chinese_ci',
    "--init-connect=SET NAMES gbk; SET autocommit = 0;"
    . " SET sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES'",
]);
$DB->start(fresh => 1);
END { $DB->stop if $DB && $$ == $OWNER }

$ENV{TEST_NGINX_HOSTILE_PORT} = $DB->{port};

# two workers: a duplicate may be claimed on the other one's connections
master_on();
workers(2);

no_shuffle();
block_defaults(
    http_config => IdemTest::store_config(
        mysql => ['127.0.0.1:$TEST_NGINX_HOSTILE_PORT'], pool => 4),
    config => IdemTest::orders_location(add_header => 'X-Idem', count => 1),
    no_error_log => [qr/\[error\].*idempotency/, '[alert]', '[crit]',
                     '[emerg]']);
run_tests();

__DATA__

=== TEST 1: every byte value, quotes and backslashes included: the claim and the completion are committed, duplicates on other connections get the response byte for byte
--- init
like($main::DB->root_sql("SELECT \@\@global.autocommit, \@\@global.sql_mode,"
                         . " \@\@global.character_set_server,"
                         . " \@\@global.init_connect"),
     qr/^0\t(?=.*NO_BACKSLASH_ESCAPES)(?=.*ANSI_QUOTES)\S+\tgbk\tSET NAMES gbk/,
     'the server has hostile defaults');
my $r = post_key('/orders?binary=1', 't180-binary');
is(idem_of($r), '201 new', 'the first request is executed');
is($r->{body}, CORE::join('', map { chr($_) } 0..255, CORE::reverse(0..255))
               . ("\0" x 64), '... its binary body');
is($main::DB->sql("SELECT state FROM idempotency_keys WHERE key_hash = X'"
                  . key_hash_hex('t180-binary') . "'") =~ s/\s+//gr, '1',
   'another session sees the completed row');
--- more_headers
Idempotency-Key: t180-binary
--- request eval
[("POST /orders?binary=1\nx") x 4, "GET /count?key=t180-binary"]
--- error_code eval
[201, 201, 201, 201, 200]
--- response_headers eval
[("X-Idem: replay") x 4, ""]
--- response_body eval
[(CORE::join('', map { chr($_) } 0..255, CORE::reverse(0..255)) . ("\0" x 64))
 x 4, "1"]



=== TEST 2: a key and a body with quotes, backslashes and a gbk lead byte: new, then replay, executed once
--- more_headers
Idempotency-Key: t180-quote'\x
--- request eval
["POST /orders\nit's a \\\"body\\\" \x{bf}\x{27}",
 "POST /orders\nit's a \\\"body\\\" \x{bf}\x{27}",
 "GET /count?key=t180-quote%27%5Cx"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1,', '"execution":1,', '^1$']
