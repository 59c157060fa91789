# gRPC through grpc_pass, with a real @grpc/grpc-js server and client
# (t/tools/grpc-server.js, started by scripts/services.sh; grpc-call.js):
# the key in the idempotency-key metadata, a replay with the same message,
# status and trailing metadata from each source (MySQL, the zone, Redis),
# an error status stored and replayed, ten concurrent calls of one key,
# the deadline and the upstream's RST_STREAM never running a call twice,
# a status that says the call never ran giving the key back, and the
# module's own answers as gRPC statuses (not to gRPC-Web).  Then the
# trailers of a gRPC answer to an HTTP/1.1 client: chunked, and the same
# on the replay; and a trailers-only answer that reaches its client only
# once its completion is committed.
#
# The calls are made by --- init (grpc-call.js speaks HTTP/2 to the
# servers of http_config); each block's request then reads its key's row
# through the operator API on Test::Nginx's own server, which is also the
# HTTP/1.1 one.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use JSON::PP ();
use POSIX ();

IdemStress::begin_file();
plan skip_all => 'no gRPC backend (TEST_NGINX_GRPC_PORT, scripts/node-deps.sh)'
    unless $ENV{TEST_NGINX_GRPC_PORT}
           && -d "$IdemStress::BUILD/node/node_modules/\@grpc/grpc-js";
plan 'no_plan';

our $GRPC = $ENV{TEST_NGINX_GRPC_PORT};
our %P = (mysql => IdemTest::extra_port(93), shm => IdemTest::extra_port(94),
          redis => IdemTest::extra_port(95), down => IdemTest::extra_port(96),
          slow => IdemTest::extra_port(98));

# a server of HTTP/2 on $port for the gRPC service, keyed by the
# idempotency-key metadata, on $store
sub grpc_server {
    my ($port, $store, $extra) = @_;
    return "server {\n"
         . "    " . IdemStress::listen_http2("127.0.0.1:$port", '    ') . "\n"
         . "    location /idem.Payments/ {\n"
         . "        idempotency $store;\n"
         . "        idempotency_header idempotency-key;\n"
         . "        idempotency_required on;\n"
         . "        add_header x-tier \$idempotency_tier always;\n"
         . "        grpc_pass grpc://127.0.0.1:\$TEST_NGINX_GRPC_PORT;\n"
         . ($extra // '')
         . "    }\n"
         . "}\n";
}

sub store {
    my ($name, $port, %p) = @_;
    return IdemStress::store_line($name, $port, %p);
}

# calls through nginx (or the server itself), as grpc-call.js reports them
sub call {
    my ($port, $key, $req, %o) = @_;
    my $json = JSON::PP->new->canonical->encode($req);
    my $n = $o{n} // 1;
    my $dl = $o{deadline} // '';
    my $out = `node t/tools/grpc-call.js $port Charge '$key' '$json' $n $dl`;
    my $res = eval { JSON::PP::decode_json($out) };
    die "grpc-call.js: $out\n" unless ref $res eq 'ARRAY';
    return $o{n} ? $res : $res->[0];
}

sub count {
    my ($key) = @_;
    my $out = `node t/tools/grpc-call.js $GRPC Count - '{"key":"$key"}'`;
    my $res = eval { JSON::PP::decode_json($out) } // [];
    return $res->[0]{response}{count};
}

# what a replay must repeat: status, message, answer, trailing metadata
# and the server's initial metadata (nginx's own date and the replay's
# marks aside)
sub answer {
    my ($r) = @_;
    my %t = %{ $r->{trailing} };
    my %i = %{ $r->{initial} };
    delete @t{qw(date server x-tier idempotent-replayed)};
    delete @i{qw(date server x-tier idempotent-replayed)};
    return { code => $r->{code}, details => $r->{details},
             response => $r->{response}, trailing => \%t, initial => \%i };
}

sub state_of {
    my ($key) = @_;
    return sql("SELECT state FROM idempotency_keys WHERE key_hash = UNHEX('"
               . key_hash_hex($key) . "')");
}

sub row_format {
    my ($key) = @_;
    my $out = sql("SELECT SUBSTRING(response, 1, 4) FROM idempotency_keys"
                  . " WHERE key_hash = UNHEX('" . key_hash_hex($key) . "')");
    return ($out =~ /(IDR\d)/)[0] // '';
}

# a call of each source: it succeeds, and its duplicate is its replay,
# from that source; the service ran it once
sub replay_from {
    my ($src) = @_;
    my $key = "t090-ok-$src";
    my $first = call($P{$src}, $key, { amount => 42 });
    is($first->{code}, 0, "$src: the call succeeds");
    is($first->{trailing}{'x-charge-id'}, "ch_${key}_1",
       "$src: ... with its trailing metadata");

    my $again = call($P{$src}, $key, { amount => 42 });
    is_deeply(answer($again), answer($first),
              "$src: the duplicate gets the same status, message and "
              . "metadata");
    is($again->{initial}{'idempotent-replayed'}, 'true',
       "$src: ... replayed");
    is($again->{initial}{'x-tier'}, $src, "$src: ... from $src");
    is(count($key), 1, "$src: Charge ran once");
}

# a gRPC error status is an answer: stored and replayed
sub error_status {
    my ($mode) = @_;
    my $key = "t090-$mode";
    my $req = { mode => $mode, code => 9, message => 'card declined: 51' };
    my $first = call($P{mysql}, $key, $req);
    is($first->{code}, 9, "$mode: FAILED_PRECONDITION from the server");

    my $again = call($P{mysql}, $key, $req);
    is_deeply(answer($again), answer($first),
              "$mode: replayed with its code, message and trailing "
              . "metadata");
    is($again->{trailing}{'x-charge-id'}, "ch_${key}_1",
       "$mode: ... the first call's metadata");
    is(count($key), 1, "$mode: Charge ran once");
}

master_on();
workers(2);

no_shuffle();
block_defaults(
    http_config => store('plain', $ENV{TEST_NGINX_MYSQL_PORT})
        . store('zone', $ENV{TEST_NGINX_MYSQL_PORT}, cache => 'idem_t090:1m')
        . store('red', $ENV{TEST_NGINX_MYSQL_PORT},
                redis => "127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                secret => 't090-test-secret-0123456789')
        . store('down', 1, connect_timeout => '500ms')
        . store('slow', $ENV{TEST_NGINX_MYSQL_PORT}, query_timeout => '10s')
        . grpc_server($P{mysql}, 'plain')
        . grpc_server($P{slow}, 'slow', "        idempotency_lease 30s;\n")
        . grpc_server($P{shm}, 'zone')
        . grpc_server($P{redis}, 'red')
        . grpc_server($P{down}, 'down'),
    config => <<'CONFIG',
    location /idem.Payments/ {
        idempotency plain;
        idempotency_header idempotency-key;
        grpc_pass grpc://127.0.0.1:$TEST_NGINX_GRPC_PORT;
    }

    location = /admin { idempotency_admin plain; }
CONFIG
    response_headers => "Content-Type: application/json",
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: a call replayed from MySQL: the same status, message and metadata, the service ran it once, and the row's record has trailers
--- init
main::replay_from('mysql');
is(main::row_format('t090-ok-mysql'), 'IDR3', "mysql: the row's record has trailers");
--- request
GET /admin?key=t090-ok-mysql
--- response_body_like: "state":"completed",.*"status":200,



=== TEST 2: a call replayed from the zone: the same status, message and metadata, the service ran it once
--- init
main::replay_from('shm');
--- request
GET /admin?key=t090-ok-shm
--- response_body_like: "state":"completed",.*"status":200,



=== TEST 3: a call replayed from Redis: the same status, message and metadata, the service ran it once
--- init
main::replay_from('redis');
--- request
GET /admin?key=t090-ok-redis
--- response_body_like: "state":"completed",.*"status":200,



=== TEST 4: a gRPC error status is an answer: stored and replayed with its code, message and trailing metadata; the service ran it once
--- init
main::error_status('fail');
--- request
GET /admin?key=t090-fail
--- response_body_like: "state":"completed",



=== TEST 5: a gRPC error status sent late is an answer: stored and replayed with its code, message and trailing metadata; the service ran it once
--- init
main::error_status('fail-late');
--- request
GET /admin?key=t090-fail-late
--- response_body_like: "state":"completed",



=== TEST 6: ten calls at once with one key: one runs, the others get its replay or ABORTED with a message and when to retry; a retry gets its answer
--- init
my $key = 't090-ten';
my $res = main::call($main::P{mysql}, $key, { mode => 'sleep', sleep_ms => 1500 },
                     n => 10);
my @ok = grep { $_->{code} == 0 } @$res;
my @busy = grep { $_->{code} == 10 } @$res;
my @fresh = grep { !$_->{initial}{'idempotent-replayed'} } @ok;

is(scalar @fresh, 1, 'ten at once: one call ran');
is(@ok + @busy, 10, '... the others: its replay or ABORTED');
ok(@busy, '... ABORTED while it runs') or diag explain $res;
like($busy[0]{details} // '', qr/^Request in progress: /,
     '... with a message a person reads');
is($busy[0]{trailing}{'grpc-retry-pushback-ms'}, '1000',
   '... and when to retry');
is(main::count($key), 1, 'Charge ran once');

my $again = main::call($main::P{mysql}, $key, { mode => 'sleep', sleep_ms => 1500 });
is_deeply(main::answer($again), main::answer($fresh[0]), 'a retry gets its answer');
--- request
GET /admin?key=t090-ten
--- response_body_like: "state":"completed",.*"status":200,
--- timeout: 10



=== TEST 7: the client's deadline: the retry learns the outcome is unknown (UNKNOWN), readable; the service ran it once
--- init
my $key = 't090-deadline';
my $req = { mode => 'sleep', sleep_ms => 1500 };
my $first = main::call($main::P{mysql}, $key, $req, deadline => 300);
is($first->{code}, 4, 'deadline: the client gives up');

my $again = IdemStress::wait_for('the outcome recorded', 10, sub {
    my $r = main::call($main::P{mysql}, $key, $req);
    return $r->{code} == 10 ? undef : $r;
}, 0.2);
is($again->{code}, 2, 'deadline: the retry learns the outcome is '
                      . 'unknown (UNKNOWN)');
like($again->{details}, qr/^Outcome unknown: /, '... readable');
is(main::count($key), 1, 'deadline: Charge ran once');
--- request
GET /admin?key=t090-deadline
--- response_body_like: "state":"unknown",



=== TEST 8: the upstream's RST_STREAM: the call fails, the retry gets UNKNOWN; the service ran it once
--- init
my $key = 't090-rst';
my $first = main::call($main::P{mysql}, $key, { mode => 'rst' });
isnt($first->{code}, 0, 'RST_STREAM: the call fails');

my $again = main::call($main::P{mysql}, $key, { mode => 'rst' });
is($again->{code}, 2, 'RST_STREAM: the retry gets UNKNOWN');
is(main::count($key), 1, 'RST_STREAM: Charge ran once');
--- request
GET /admin?key=t090-rst
--- response_body_like: "state":"unknown",



=== TEST 9: UNAVAILABLE before any header: the call never ran, the key was given back, and a retry runs anew, once
--- init
my $key = 't090-refused';
my $first = main::call($main::P{mysql}, $key, { mode => 'refuse' });
is($first->{code}, 14, 'refused: UNAVAILABLE');

my $again = main::call($main::P{mysql}, $key, { amount => 7 });
is($again->{code}, 0, 'refused: the key was given back, a retry runs');
ok(!$again->{initial}{'idempotent-replayed'}, '... anew');
is(main::count($key), 1, '... once');
--- request
GET /admin?key=t090-refused
--- response_body_like: "state":"completed",.*"status":200,



=== TEST 10: the module's own answers are gRPC statuses: no key or a key too long is INVALID_ARGUMENT, the key of another call FAILED_PRECONDITION, readable
--- init
my $r = main::call($main::P{mysql}, '-', { amount => 1 });
is($r->{code}, 3, 'no key: INVALID_ARGUMENT');
like($r->{details}, qr/^Idempotency key missing: /, '... readable');

$r = main::call($main::P{mysql}, 'x' x 300, { amount => 1 });
is($r->{code}, 3, 'a key too long: INVALID_ARGUMENT');

is(main::call($main::P{mysql}, 't090-reused', { amount => 42 })->{code}, 0,
   'a call');
$r = main::call($main::P{mysql}, 't090-reused', { amount => 43 });
is($r->{code}, 9, 'the key of another call: FAILED_PRECONDITION');
like($r->{details}, qr/^Idempotency key reused: /, '... readable');
--- request
GET /admin?key=t090-reused
--- response_body_like: "state":"completed",.*"status":200,



=== TEST 11: the store down is UNAVAILABLE with when to retry, and the call did not run
--- init
my $r = main::call($main::P{down}, 't090-down', { amount => 1 });
is($r->{code}, 14, 'the store down: UNAVAILABLE');
is($r->{trailing}{'grpc-retry-pushback-ms'}, '1000', '... retry later');
is(main::count('t090-down'), 0, '... and the call did not run');
--- request
GET /admin?key=t090-down
--- error_code: 404
--- response_headers
Content-Type: application/problem+json
--- response_body_like: key-not-found



=== TEST 12: grpc-web carries its status in the body, where the module reads no status: not a gRPC call to it, and its answers stay HTTP problems (which grpc-web clients map by HTTP status)
--- init
my %want = ('application/grpc+proto' => qr/^grpc-status: 3\r$/m,
            'application/grpc;charset=x' => qr/^grpc-status: 3\r$/m,
            'application/grpc-web+proto' =>
                qr/^content-type: application\/problem\+json\r$/m,
            'application/grpc-web-text' =>
                qr/^content-type: application\/problem\+json\r$/m,
            'application/grpcx' =>
                qr/^content-type: application\/problem\+json\r$/m);
# (no body: curl 7.88 fails a stream that ends before its request)
my $curl = "curl -sS -i --http2-prior-knowledge -X POST"
         . " http://127.0.0.1:$main::P{mysql}/idem.Payments/Charge";
for my $type (sort keys %want) {
    my $out = `$curl -H 'content-type: $type'`;
    my $grpc = $type =~ /^application\/grpc[+;]/;
    like($out, $grpc ? qr{^HTTP/2 200 }m : qr{^HTTP/2 400 }m,
         "$type, no key: " . ($grpc ? 'a gRPC status' : 'HTTP 400'));
    like($out, $want{$type}, '... ' . ($grpc ? 'INVALID_ARGUMENT'
                                             : 'a problem'));
}
--- request
GET /admin?list=in_progress
--- response_body_like: ^\{



=== TEST 13: a gRPC answer to an HTTP/1.1 client: the trailers chunked, the same on the replay, in order; the service ran it once
--- init
my $key = 't090-h1';
my $msg = '{"amount":9}';
my $frame = pack('CN', 0, length $msg) . $msg;
my $file = "$IdemStress::DIR/grpc/t090-h1.bin";
IdemStress::write_file($file, $frame);

my $curl = "curl -sS --raw -i --http1.1 -H 'content-type: application/grpc'"
         . " -H 'te: trailers' -H 'idempotency-key: $key'"
         . " --data-binary \@$file"
         . " http://127.0.0.1:" . port() . "/idem.Payments/Charge";
my @runs = map { scalar `$curl` } 1 .. 2;

for my $i (0, 1) {
    my ($head, $body) = split /\r\n\r\n/, $runs[$i], 2;
    like($head, qr/^Transfer-Encoding: chunked\r$/mi,
         "HTTP/1.1 #$i: chunked");
    like($body // '', qr/\r\n0\r\ngrpc-status: 0\r\n/,
         "HTTP/1.1 #$i: grpc-status in the trailers");
    like($body // '', qr/^x-charge-id: ch_\Q$key\E_1\r$/m,
         "HTTP/1.1 #$i: ... with the trailing metadata");
}

like($runs[1], qr/^Idempotent-Replayed: true\r$/mi,
     'HTTP/1.1: the second is a replay');
my @tails = map { (split /\r\n0\r\n/, $_, 2)[1] // '' } @runs;
is($tails[1], $tails[0], 'HTTP/1.1: the same trailers, in order');
is(main::count($key), 1, 'HTTP/1.1: Charge ran once');
--- request
GET /admin?key=t090-h1
--- response_body_like: "state":"completed",.*"status":200,



=== TEST 14: a trailers-only answer ends the HTTP/2 stream with its header: that header waits for the completion, so that a client that has the answer and retries at once is replayed, not told ABORTED
--- init
my $key = 't090-ryw';
my $kh = key_hash_hex($key);
my $sock = $ENV{TEST_NGINX_MYSQL_SOCKET};
my $go = "$IdemStress::DIR/grpc/t090-ryw.go";
my $out = "$IdemStress::DIR/grpc/t090-ryw.json";
unlink $go, $out;
my $req = { mode => 'fail', code => 9, message => 'card declined: 51',
            wait => $go };
my $json = JSON::PP->new->canonical->encode($req);

my $call = fork // die;
if ($call == 0) {
    exec "node t/tools/grpc-call.js $main::P{slow} Charge '$key' '$json'"
         . " > '$out'";
}
IdemStress::wait_for('the claim', 10, sub { main::state_of($key) =~ /^0$/m });

# the row is held while the server answers: the completion waits
my $lock = fork // die;
if ($lock == 0) {
    open STDERR, '>', '/dev/null';
    eval { sql("BEGIN; SELECT state FROM idempotency_keys WHERE key_hash"
               . " = UNHEX('$kh') FOR UPDATE; DO SLEEP(30); ROLLBACK") };
    POSIX::_exit(0);
}
my $processes = sub {
    my ($like) = @_;
    sql_root($sock, "SELECT ID FROM information_schema.PROCESSLIST"
             . " WHERE INFO LIKE '$like' AND ID <> CONNECTION_ID()")
        =~ /^(\d+)$/m ? $1 : undef;
};
my $holder = IdemStress::wait_for('the row held', 10,
                                  sub { $processes->('DO SLEEP(30)%') });
IdemStress::write_file($go, '');
IdemStress::wait_for('the completion waiting for the row', 10,
    sub { $processes->('UPDATE %SET state = %') });

# a client that had its answer would be gone well within this
my $early = eval {
    IdemStress::wait_for('the answer', 3,
                         sub { waitpid($call, POSIX::WNOHANG()) > 0 });
};
sql_root($sock, "KILL $holder");
waitpid $lock, 0;
waitpid $call, 0 unless $early;

ok(!$early, 'trailers-only: no answer while its completion waits');
my $first = JSON::PP::decode_json(IdemStress::read_file($out))->[0];
is($first->{code}, 9, 'trailers-only: then FAILED_PRECONDITION');
is(main::state_of($key), "1\n", '... once the row is completed');

my $again = main::call($main::P{slow}, $key, $req);
is_deeply(main::answer($again), main::answer($first),
          'trailers-only: the retry gets the replay');
is(main::count($key), 1, 'trailers-only: Charge ran once');
--- request
GET /admin?key=t090-ryw
--- response_body_like: "state":"completed",
--- timeout: 10



=== TEST 15: an answer without a gRPC status is not a whole one: unknown, never stored, never run again
--- init
my $key = 't090-nostatus';
my $first = main::call($main::P{mysql}, $key, { mode => 'nostatus' });
isnt($first->{code}, 0, 'no grpc-status: the client has no success');
IdemStress::wait_for('the outcome recorded', 10,
                     sub { main::state_of($key) eq "3\n" });
my $again = main::call($main::P{mysql}, $key, { mode => 'nostatus' });
is($again->{code}, 2, 'no grpc-status: the retry gets UNKNOWN');
is(main::count($key), 1, 'no grpc-status: Charge ran once');
--- request
GET /admin?key=t090-nostatus
--- response_body_like: "state":"unknown",



=== TEST 16: a header with content-length: 0 is not the end of an answer whose status comes in its trailers: the retry gets OK with the trailers, replayed
--- init
# (nginx's HTTP/2 ends the first client's stream with such a header,
# before the trailers come: that client has no status; the key keeps the
# server's, and the trailers, for every retry)
my $key = 't090-len0';
main::call($main::P{mysql}, $key, { mode => 'len0' });
my $replay = main::call($main::P{mysql}, $key, { mode => 'len0' });
is($replay->{code}, 0, 'content-length 0: the retry gets OK, the status'
   . ' from the trailers');
is($replay->{trailing}{'x-charge-id'}, "ch_${key}_1", '... with the trailers');
is($replay->{initial}{'idempotent-replayed'}, 'true', '... replayed');
is(main::count($key), 1, 'content-length 0: Charge ran once');
--- request
GET /admin?key=t090-len0
--- response_body_like: "state":"completed",.*"status":200,
