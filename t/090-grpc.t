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

use strict;
use warnings;

use JSON::PP ();
use POSIX ();
use Test::More;

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();

my $GRPC = $ENV{TEST_NGINX_GRPC_PORT};
plan skip_all => 'no gRPC backend (TEST_NGINX_GRPC_PORT, scripts/node-deps.sh)'
    unless $GRPC && -d "$BUILD/node/node_modules/\@grpc/grpc-js";

my %P = (mysql => port(93), shm => port(94), redis => port(95),
         down => port(96), h1 => port(97), slow => port(98));
my $RUN = "t090-$$";
my $ngx;

END { $ngx->stop if $ngx }

sub grpc_server {
    my ($port, $store, $extra) = @_;
    $extra //= '';
    return "    server {\n"
         . "        " . IdemStress::listen_http2("127.0.0.1:$port",
                                                 '        ') . "\n"
         . "        location /idem.Payments/ {\n"
         . "            idempotency $store;\n"
         . "            idempotency_header idempotency-key;\n"
         . "            idempotency_required on;\n"
         . "            add_header x-tier \$idempotency_tier always;\n"
         . "            grpc_pass grpc://127.0.0.1:$GRPC;\n"
         . $extra
         . "        }\n"
         . "    }\n";
}

my $mysql = $ENV{TEST_NGINX_MYSQL_PORT};

$ngx = IdemStress::Nginx->start(name => 'grpc', port => $P{h1},
    http => store_line('plain', $mysql)
          . store_line('zone', $mysql, cache => 'idem_t090:1m')
          . store_line('red', $mysql,
                       redis => "127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}",
                       secret => 't090-test-secret-0123456789')
          . store_line('down', 1, connect_timeout => '500ms')
          . store_line('slow', $mysql, query_timeout => '10s')
          . grpc_server($P{mysql}, 'plain')
          . grpc_server($P{slow}, 'slow',
                        "            idempotency_lease 30s;\n")
          . grpc_server($P{shm}, 'zone')
          . grpc_server($P{redis}, 'red')
          . grpc_server($P{down}, 'down')
          . "    server {\n"
          . "        listen 127.0.0.1:$P{h1};\n"
          . "        location /idem.Payments/ {\n"
          . "            idempotency plain;\n"
          . "            idempotency_header idempotency-key;\n"
          . "            grpc_pass grpc://127.0.0.1:$GRPC;\n"
          . "        }\n"
          . "    }\n");

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

sub row_format {
    my ($key) = @_;
    my $kh = IdemStress::key_hash_hex($key);
    my $out = IdemStress::sql_at($mysql, "SELECT SUBSTRING(response, 1, 4)"
        . " FROM idempotency_keys WHERE key_hash = UNHEX('$kh')");
    return ($out =~ /(IDR\d)/)[0] // '';
}

# ---- 1. replay from each source: same message, status, metadata

for my $src (qw(mysql shm redis)) {
    my $key = "$RUN-ok-$src";
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
    is(row_format($key), 'IDR3', "$src: the row's record has trailers")
        if $src eq 'mysql';
}

# ---- 2. a gRPC error status is an answer: stored and replayed

for my $mode (qw(fail fail-late)) {
    my $key = "$RUN-$mode";
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

# ---- 3. ten concurrent calls with one key

{
    my $key = "$RUN-ten";
    my $res = call($P{mysql}, $key, { mode => 'sleep', sleep_ms => 1500 },
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
    is(count($key), 1, 'Charge ran once');

    my $again = call($P{mysql}, $key, { mode => 'sleep', sleep_ms => 1500 });
    is_deeply(answer($again), answer($fresh[0]), 'a retry gets its answer');
}

# ---- 4. a deadline, the upstream's RST_STREAM: never twice

{
    my $key = "$RUN-deadline";
    my $req = { mode => 'sleep', sleep_ms => 1500 };
    my $first = call($P{mysql}, $key, $req, deadline => 300);
    is($first->{code}, 4, 'deadline: the client gives up');

    my $again = IdemStress::wait_for('the outcome recorded', 10, sub {
        my $r = call($P{mysql}, $key, $req);
        return $r->{code} == 10 ? undef : $r;
    }, 0.2);
    is($again->{code}, 2, 'deadline: the retry learns the outcome is '
                          . 'unknown (UNKNOWN)');
    like($again->{details}, qr/^Outcome unknown: /, '... readable');
    is(count($key), 1, 'deadline: Charge ran once');
}

{
    my $key = "$RUN-rst";
    my $first = call($P{mysql}, $key, { mode => 'rst' });
    isnt($first->{code}, 0, 'RST_STREAM: the call fails');

    my $again = call($P{mysql}, $key, { mode => 'rst' });
    is($again->{code}, 2, 'RST_STREAM: the retry gets UNKNOWN');
    is(count($key), 1, 'RST_STREAM: Charge ran once');
}

# ---- 5. UNAVAILABLE before any header: the call never ran

{
    my $key = "$RUN-refused";
    my $first = call($P{mysql}, $key, { mode => 'refuse' });
    is($first->{code}, 14, 'refused: UNAVAILABLE');

    my $again = call($P{mysql}, $key, { amount => 7 });
    is($again->{code}, 0, 'refused: the key was given back, a retry runs');
    ok(!$again->{initial}{'idempotent-replayed'}, '... anew');
    is(count($key), 1, '... once');
}

# ---- 6. the module's own answers are gRPC statuses

{
    my $r = call($P{mysql}, '-', { amount => 1 });
    is($r->{code}, 3, 'no key: INVALID_ARGUMENT');
    like($r->{details}, qr/^Idempotency key missing: /, '... readable');

    $r = call($P{mysql}, 'x' x 300, { amount => 1 });
    is($r->{code}, 3, 'a key too long: INVALID_ARGUMENT');

    $r = call($P{mysql}, "$RUN-ok-mysql", { amount => 43 });
    is($r->{code}, 9, 'the key of another call: FAILED_PRECONDITION');
    like($r->{details}, qr/^Idempotency key reused: /, '... readable');

    $r = call($P{down}, "$RUN-down", { amount => 1 });
    is($r->{code}, 14, 'the store down: UNAVAILABLE');
    is($r->{trailing}{'grpc-retry-pushback-ms'}, '1000', '... retry later');
    is(count("$RUN-down"), 0, '... and the call did not run');

    # grpc-web carries its status in the body, where the module reads no
    # status: not a gRPC call to it, and its answers stay HTTP problems
    # (which grpc-web clients map by HTTP status)
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
             . " http://127.0.0.1:$P{mysql}/idem.Payments/Charge";
    for my $type (sort keys %want) {
        my $out = `$curl -H 'content-type: $type'`;
        my $grpc = $type =~ /^application\/grpc[+;]/;
        like($out, $grpc ? qr{^HTTP/2 200 }m : qr{^HTTP/2 400 }m,
             "$type, no key: " . ($grpc ? 'a gRPC status' : 'HTTP 400'));
        like($out, $want{$type}, '... ' . ($grpc ? 'INVALID_ARGUMENT'
                                                 : 'a problem'));
    }
}

# ---- 7. HTTP/1.1: the trailers chunked, the same on the replay

{
    my $key = "$RUN-h1";
    my $msg = '{"amount":9}';
    my $frame = pack('CN', 0, length $msg) . $msg;
    my $file = "$IdemStress::DIR/grpc/t090-h1.bin";
    IdemStress::write_file($file, $frame);

    my $curl = "curl -sS --raw -i --http1.1 -H 'content-type: application/grpc'"
             . " -H 'te: trailers' -H 'idempotency-key: $key'"
             . " --data-binary \@$file"
             . " http://127.0.0.1:$P{h1}/idem.Payments/Charge";
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
    is(count($key), 1, 'HTTP/1.1: Charge ran once');
}

# ---- 8. a trailers-only answer ends the HTTP/2 stream with its header:
# that header waits for the completion, so that a client that has the
# answer and retries at once is replayed, not told ABORTED

{
    my $key = "$RUN-ryw";
    my $kh = IdemStress::key_hash_hex($key);
    my $sock = $ENV{TEST_NGINX_MYSQL_SOCKET};
    my $go = "$IdemStress::DIR/grpc/t090-ryw.go";
    my $out = "$IdemStress::DIR/grpc/t090-ryw.json";
    unlink $go, $out;
    my $req = { mode => 'fail', code => 9, message => 'card declined: 51',
                wait => $go };
    my $json = JSON::PP->new->canonical->encode($req);

    my $call = fork // die;
    if ($call == 0) {
        exec "node t/tools/grpc-call.js $P{slow} Charge '$key' '$json'"
             . " > '$out'";
    }
    my $state = sub {
        IdemStress::sql_at($mysql, "SELECT state FROM idempotency_keys"
                                   . " WHERE key_hash = UNHEX('$kh')");
    };
    IdemStress::wait_for('the claim', 10, sub { $state->() =~ /^0$/m });

    # the row is held while the server answers: the completion waits
    my $lock = fork // die;
    if ($lock == 0) {
        open STDERR, '>', '/dev/null';
        eval { IdemStress::sql_at($mysql, "BEGIN; SELECT state FROM"
                   . " idempotency_keys WHERE key_hash = UNHEX('$kh')"
                   . " FOR UPDATE; DO SLEEP(30); ROLLBACK") };
        POSIX::_exit(0);
    }
    my $processes = sub {
        my ($like) = @_;
        IdemStress::sql_root($sock, "SELECT ID FROM"
            . " information_schema.PROCESSLIST WHERE INFO LIKE '$like'"
            . " AND ID <> CONNECTION_ID()") =~ /^(\d+)$/m ? $1 : undef;
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
    IdemStress::sql_root($sock, "KILL $holder");
    waitpid $lock, 0;
    waitpid $call, 0 unless $early;

    ok(!$early, 'trailers-only: no answer while its completion waits');
    my $first = JSON::PP::decode_json(IdemStress::read_file($out))->[0];
    is($first->{code}, 9, 'trailers-only: then FAILED_PRECONDITION');
    is($state->(), "1\n", '... once the row is completed');

    my $again = call($P{slow}, $key, $req);
    is_deeply(answer($again), answer($first),
              'trailers-only: the retry gets the replay');
    is(count($key), 1, 'trailers-only: Charge ran once');
}

# ---- 9. an answer without a gRPC status is not a whole one (unknown,
# never stored, never run again); a header with content-length: 0 is not
# the end of an answer whose status comes in its trailers

{
    my $key = "$RUN-nostatus";
    my $first = call($P{mysql}, $key, { mode => 'nostatus' });
    isnt($first->{code}, 0, 'no grpc-status: the client has no success');
    IdemStress::wait_for('the outcome recorded', 10, sub {
        IdemStress::sql_at($mysql, "SELECT state FROM idempotency_keys"
            . " WHERE key_hash = UNHEX('" . IdemStress::key_hash_hex($key)
            . "')") eq "3\n" });
    my $again = call($P{mysql}, $key, { mode => 'nostatus' });
    is($again->{code}, 2, 'no grpc-status: the retry gets UNKNOWN');
    is(count($key), 1, 'no grpc-status: Charge ran once');

    # (nginx's HTTP/2 ends the first client's stream with such a header,
    # before the trailers come: that client has no status; the key keeps
    # the server's, and the trailers, for every retry)
    $key = "$RUN-len0";
    call($P{mysql}, $key, { mode => 'len0' });
    my $replay = call($P{mysql}, $key, { mode => 'len0' });
    is($replay->{code}, 0, 'content-length 0: the retry gets OK, the status'
       . ' from the trailers');
    is($replay->{trailing}{'x-charge-id'}, "ch_${key}_1",
       '... with the trailers');
    is($replay->{initial}{'idempotent-replayed'}, 'true', '... replayed');
    is(count($key), 1, 'content-length 0: Charge ran once');
}

is_deeply([ $ngx->crashes ], [], 'no worker crashed');

done_testing();
