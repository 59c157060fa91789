# Replay fidelity: a replay is the first answer, as nginx sent it, from
# each replay source (MySQL, the shared-memory zone, Redis): whatever the
# retry's conditional headers say, a Range, through nginx's own filters
# (gzip, sub_filter, addition, ssi, charset) on a charset-bearing type
# (gzip and addition act on a 200 only: a PATCH),
# with a Location that nginx made absolute, and for a HEAD.
#
# Each block has one location per replay source, /m/ (a store without a
# tier: MySQL replays), /s/ (a store with a zone) and /r/ (a store with
# Redis), all on the same table and backend.  A request is sent once (the
# first answer), then repeated until the source under test answers it:
# the two must be the same bytes, but for Date and the replay's marker.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use Time::HiRes ();

our %TIER = (m => 'mysql', s => 'shm', r => 'redis');

sub stores {
    return TierTest::tier_stores(m => '', s => 'cache=idem_t075:1m',
        r => "redis=127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}");
}

# location /m/, /s/ and /r/, each with its store and the directives given
sub locations {
    my (@extra) = @_;
    my $out = '';

    for my $s (qw(m s r)) {
        $out .= "    location /$s/ {\n"
              . "        idempotency $s;\n"
              . "        idempotency_methods POST PATCH HEAD;\n"
              . "        proxy_pass http://backend/;\n"
              . join('', map { "        $_\n" } @extra)
              . "        add_header X-Tier \$idempotency_tier always;\n"
              . "    }\n";
    }

    return $out . "    location = /count { proxy_pass http://backend/__count; }\n";
}

# the first answer to a request, then its replay by source $src (Redis
# gets an entry once the completion is committed: the request is
# repeated until that source answers it)
sub first_and_replay {
    my ($src, %q) = @_;

    my $first = http_req(%q);
    my $end = Time::HiRes::time() + 10;
    my $replay;

    while (1) {
        $replay = http_req(%q);
        last if $replay->{tier} eq $TIER{$src};
        last if Time::HiRes::time() > $end;
        Time::HiRes::sleep(0.05);
    }

    return ($first, $replay);
}

# the checks every pair gets: the first answer executed once, the replay
# from $src, and the same bytes but for Date, X-Tier and the marker
sub same_answer {
    my ($src, $key, $first, $replay, $what) = @_;

    unlike($first->{raw}, qr/\r\nIdempotent-Replayed:/,
           "$what: the first answer is an execution");
    like($replay->{raw}, qr/\r\nIdempotent-Replayed: true\r\n/,
         "$what: the retry is a replay");
    is($replay->{tier}, $TIER{$src}, "$what: replayed from $TIER{$src}");

    my $a = strip_volatile($first->{raw});
    my $b = strip_volatile($replay->{raw});
    $b =~ s/\r\nIdempotent-Replayed: true(?=\r\n)//;

    is($b, $a, "$what: the replay is the first answer, byte for byte");

    is(http_req(method => 'GET', uri => "/count?key=$key")->{body}, '1',
       "$what: the backend ran once");
}

no_shuffle();
run_tests();

__DATA__

=== TEST 1: conditional headers: a replay is the first answer (200), never nginx's 412 or 304
--- http_config eval
main::stores()
--- config eval
main::locations()
--- init
my @cond = ('If-Match: "v1"',
            'If-Unmodified-Since: Sun, 01 Jan 2006 00:00:00 GMT',
            'If-None-Match: "v2"',
            'If-None-Match: *',
            'If-Modified-Since: Tue, 03 Jan 2006 00:00:00 GMT');
for my $s (qw(m s r)) {
    for my $i (0 .. $#cond) {
        my $key = "t075-1-$s-$i";
        my ($f, $r) = main::first_and_replay($s, method => 'PATCH', key => $key,
            uri => "/$s/orders?etag=v2&lastmod=1", headers => [$cond[$i]]);
        is($f->{status}, 200, "$s $cond[$i]: the first answer is 200");
        main::same_answer($s, $key, $f, $r, "$s $cond[$i]");
    }
}
--- request
PATCH /s/orders?etag=v2&lastmod=1
--- more_headers
Idempotency-Key: t075-1-s-0
If-Match: "v1"
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
X-Tier: shm
ETag: "v2"
Last-Modified: Mon, 02 Jan 2006 15:04:05 GMT
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t075-1-s-0","execution":1,
--- no_error_log
[error]



=== TEST 2: a Range on a replay: the whole answer, 200, as the first proxied answer was
--- http_config eval
main::stores()
--- config eval
main::locations()
--- init
for my $s (qw(m s r)) {
    my $key = "t075-2-$s";
    my ($f, $r) = main::first_and_replay($s, method => 'PATCH', key => $key,
        uri => "/$s/orders?etag=v2", headers => ['Range: bytes=0-3']);
    is($f->{status}, 200, "$s: the first answer is 200");
    main::same_answer($s, $key, $f, $r, "$s Range");
}
--- request
PATCH /r/orders?etag=v2
--- more_headers
Idempotency-Key: t075-2-r
Range: bytes=0-3
If-Range: "v2"
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
X-Tier: redis
!Content-Range
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t075-2-r","execution":1,.*\}\n$
--- no_error_log
[error]



=== TEST 3: gzip_types application/json on "application/json; charset=utf-8": gzipped on the replay as on the first answer
--- http_config eval
main::stores()
--- config eval
main::locations('gzip on;', 'gzip_types application/json;', 'gzip_min_length 1;')
--- init
for my $s (qw(m s r)) {
    my $key = "t075-3-$s";
    my ($f, $r) = main::first_and_replay($s, method => 'PATCH', key => $key,
        body => 'x', uri => "/$s/orders?charset=utf-8&etag=v2",
        headers => ['Accept-Encoding: gzip']);
    like($f->{raw}, qr/\r\nContent-Encoding: gzip\r\n/,
         "$s: the first answer is gzipped");
    main::same_answer($s, $key, $f, $r, "$s gzip");
}
--- request
PATCH /m/orders?charset=utf-8&etag=v2
x
--- more_headers
Idempotency-Key: t075-3-m
Accept-Encoding: gzip
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
X-Tier: mysql
Content-Type: application/json; charset=utf-8
Content-Encoding: gzip
ETag: W/"v2"
!Content-Length
--- no_error_log
[error]



=== TEST 4: sub_filter_types application/json: the replayed body is filtered as the first was
--- http_config eval
main::stores()
--- config eval
main::locations(q{sub_filter '"execution"' '"EXECUTION"';},
                'sub_filter_types application/json;')
--- init
for my $s (qw(m s r)) {
    my $key = "t075-4-$s";
    my ($f, $r) = main::first_and_replay($s, key => $key, body => 'x',
        uri => "/$s/orders?charset=utf-8");
    like($f->{body}, qr/"EXECUTION":1/, "$s: the first body is filtered");
    main::same_answer($s, $key, $f, $r, "$s sub_filter");
}
--- request
POST /s/orders?charset=utf-8
x
--- more_headers
Idempotency-Key: t075-4-s
--- error_code: 201
--- response_headers
Idempotent-Replayed: true
X-Tier: shm
Content-Type: application/json; charset=utf-8
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t075-4-s","EXECUTION":1,
--- no_error_log
[error]



=== TEST 5: addition_types and ssi_types application/json: the replay gets the same addition and the same framing
--- http_config eval
main::stores()
--- config eval
main::locations('addition_types application/json;', 'add_after_body /tail;',
                'ssi on;', 'ssi_types application/json;')
. "    location = /tail { return 200 \"tail\\n\"; }\n"
--- init
for my $s (qw(m s r)) {
    my $key = "t075-5-$s";
    my ($f, $r) = main::first_and_replay($s, method => 'PATCH', key => $key,
        body => 'x', uri => "/$s/orders?charset=utf-8&etag=v2&lastmod=1");
    like($f->{raw}, qr/tail\n/, "$s: the first answer has the addition");
    main::same_answer($s, $key, $f, $r, "$s addition and ssi");
}
--- request
PATCH /r/orders?charset=utf-8&etag=v2&lastmod=1
x
--- more_headers
Idempotency-Key: t075-5-r
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
X-Tier: redis
!ETag
!Last-Modified
!Content-Length
--- response_body_like: ^\{"order_id":"ord-\d+","key":"t075-5-r","execution":1,.*\}\ntail\n$
--- no_error_log
[error]



=== TEST 6: the charset directive sees the replay's charset as it saw the first answer's: one charset parameter
--- http_config eval
main::stores()
--- config eval
main::locations('charset utf-8;', 'charset_types *;')
--- init
for my $s (qw(m s r)) {
    my $key = "t075-6-$s";
    my ($f, $r) = main::first_and_replay($s, key => $key, body => 'x',
        uri => "/$s/orders?charset=utf-8");
    like($f->{raw}, qr/\r\nContent-Type: application\/json; charset=utf-8\r\n/,
         "$s: the first answer has the backend's type");
    main::same_answer($s, $key, $f, $r, "$s charset");
}
--- request
POST /m/orders?charset=utf-8
x
--- more_headers
Idempotency-Key: t075-6-m
--- error_code: 201
--- raw_response_headers_like: \r\nContent-Type: application/json; charset=utf-8\r\n
--- response_headers
Idempotent-Replayed: true
--- no_error_log
[error]



=== TEST 7: Location: absolute where proxy_redirect made nginx complete it, as it was, where not
--- http_config eval
main::stores()
--- config eval
main::locations()
. CORE::join('', map { "    location /$_-pr/ {\n        idempotency $_;\n"
                 . "        proxy_pass http://backend/;\n"
                 . "        proxy_redirect http://backend/orders/ /moved/;\n"
                 . "        add_header X-Tier \$idempotency_tier always;\n"
                 . "    }\n" } qw(m s r))
--- init
my $port = IdemTest::port();
my $there = 'location=http%3A%2F%2Fbackend%2Forders%2Fx1';
my @cases = (
    # proxy_redirect default rewrites the backend's URL into /S/...
    ['rewritten', sub { "/$_[0]/orders?$there" },
     sub { "http://localhost:$port/$_[0]/orders/x1" }],
    ['proxy_redirect', sub { "/$_[0]-pr/orders?$there" },
     sub { "http://localhost:$port/moved/x1" }],
    ['relative', sub { "/$_[0]/orders" }, undef],
    ['foreign', sub { "/$_[0]/orders?location=http%3A%2F%2Fother.invalid%2Fy" },
     sub { 'http://other.invalid/y' }]);
for my $s (qw(m s r)) {
    for my $c (@cases) {
        my $key = "t075-7-$s-$c->[0]";
        my ($f, $r) = main::first_and_replay($s, key => $key, body => 'x',
                                             uri => $c->[1]->($s));
        my ($loc) = $f->{raw} =~ /\r\nLocation: ([^\r]*)\r\n/;
        if ($c->[2]) {
            is($loc, $c->[2]->($s), "$s $c->[0]: the first answer's Location");
        } else {
            like($loc, qr{^/orders/ord-\d+$}, "$s $c->[0]: the first answer's Location");
        }
        my ($rloc) = $r->{raw} =~ /\r\nLocation: ([^\r]*)\r\n/;
        is($rloc, $loc, "$s $c->[0]: the replay's Location");
        main::same_answer($s, $key, $f, $r, "$s $c->[0]");
    }
}
--- request
POST /m/orders?location=http%3A%2F%2Fbackend%2Forders%2Fx1
x
--- more_headers
Idempotency-Key: t075-7-m-rewritten
--- error_code: 201
--- raw_response_headers_like eval
"\r\nLocation: http://localhost:" . IdemTest::port() . "/m/orders/x1\r\n"
--- response_headers
Idempotent-Replayed: true
--- no_error_log
[error]



=== TEST 8: HEAD: the replay sends the Content-Length the first answer had
--- http_config eval
main::stores()
--- config eval
main::locations()
--- init
for my $s (qw(m s r)) {
    my $key = "t075-8-$s";
    my ($f, $r) = main::first_and_replay($s, method => 'HEAD', key => $key,
        uri => "/$s/orders?size=1234");
    like($f->{raw}, qr/\r\nContent-Length: 1234\r\n/,
         "$s: the first answer has the backend's length");
    is($f->{body}, '', "$s: no body after the first header");
    is($r->{body}, '', "$s: no body after the replayed header");
    main::same_answer($s, $key, $f, $r, "$s HEAD");
}
# the record of a HEAD is format 2 (it keeps that length); a POST's is
# still format 1, which every reader reads
my $p = http_req(key => 't075-8-post', uri => '/m/orders', body => 'x');
is($p->{status}, 201, 'a POST executed');
wait_state('t075-8-post', 1);
is(sql("SELECT LEFT(response, 4) FROM idempotency_keys WHERE key_hash = X'"
       . key_hash_hex('t075-8-m') . "'"), "IDR2\n", 'a HEAD record is IDR2');
is(sql("SELECT LEFT(response, 4) FROM idempotency_keys WHERE key_hash = X'"
       . key_hash_hex('t075-8-post') . "'"), "IDR1\n",
   'a record that needs nothing new is IDR1');
--- request
HEAD /s/orders?size=1234
--- more_headers
Idempotency-Key: t075-8-s
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
X-Tier: shm
Content-Length: 1234
Content-Type: application/octet-stream
--- response_body
--- no_error_log
[error]



=== TEST 9: format-1 records (written before format 2) still replay as they did
--- http_config eval
main::stores()
--- config eval
main::locations()
--- init
my $kh = key_hash_hex('t075-9');
my $fp = fingerprint('POST', '/m/orders', 'x');
my $rec = unpack('H*', record(201, [['Content-Type', 'application/json; charset=utf-8'],
                                    ['Location', '/orders/old']], "{}\n"));
sql("INSERT INTO idempotency_keys (key_hash, state, owner, fingerprint,"
    . " created_at, lease_until, expires_at, status, response) VALUES"
    . " (X'$kh', 1, X'00000000000000000000000000000002', X'$fp',"
    . " UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) + INTERVAL 1 HOUR,"
    . " 201, X'$rec')");
--- request
POST /m/orders
x
--- more_headers
Idempotency-Key: t075-9
--- error_code: 201
--- response_headers
Idempotent-Replayed: true
Content-Type: application/json; charset=utf-8
Location: /orders/old
Content-Length: 3
--- response_body
{}
--- no_error_log
[error]



=== TEST 10: "expires" rewrites the backend's Expires and Cache-Control in place, on the replay as on the first answer
--- http_config eval
main::stores()
--- config eval
main::locations('expires 1h;')
--- init
for my $s (qw(m s r)) {
    my $key = "t075-10-$s";
    my ($f, $r) = main::first_and_replay($s, key => $key, body => 'x',
        uri => "/$s/orders?expires=1");
    for my $x ([first => $f], [replay => $r]) {
        is(scalar @{$x->[1]{headers}{expires} // []}, 1,
           "$s: one Expires in the $x->[0] answer");
        is_deeply($x->[1]{headers}{'cache-control'}, ['max-age=3600'],
                  "$s: the $x->[0] answer's Cache-Control");
    }
    like($r->{raw}, qr/\r\nIdempotent-Replayed: true\r\n/, "$s: a replay");
    is($r->{tier}, $main::TIER{$s}, "$s: from $main::TIER{$s}");
    is(http_req(method => 'GET', uri => "/count?key=$key")->{body}, '1',
       "$s: the backend ran once");
}
--- request
POST /m/orders?expires=1
x
--- more_headers
Idempotency-Key: t075-10-m
--- error_code: 201
--- response_headers
Idempotent-Replayed: true
Cache-Control: max-age=3600
--- no_error_log
[error]



=== TEST 11: without fingerprints, a POST with a HEAD's key gets the record's empty body with Content-Length: 0, not the HEAD's length
--- http_config eval
main::stores()
--- config eval
main::locations('idempotency_fingerprint off;')
--- init
my $h = http_req(method => 'HEAD', key => 't075-11', uri => '/m/orders?size=1234');
like($h->{raw}, qr/\r\nContent-Length: 1234\r\n/, 'the HEAD answer has its length');
wait_state('t075-11', 1);
--- request
POST /m/orders?size=1234
x
--- more_headers
Idempotency-Key: t075-11
--- error_code: 200
--- response_headers
Idempotent-Replayed: true
Content-Length: 0
--- response_body
--- no_error_log
[error]



=== TEST 12: X-Accel-Charset: the charset filter recodes the replay to the backend's charset as it did the first answer
--- http_config eval
main::stores() . "charset_map windows-1251 utf-8 { C0 D090; }\n"
--- config eval
main::locations()
--- init
for my $s (qw(m s r)) {
    my $key = "t075-12-$s";
    my ($f, $r) = main::first_and_replay($s, key => $key, body => 'x',
        uri => "/$s/orders?charset=utf-8&accel_charset=windows-1251");
    like($f->{raw}, qr/\r\nContent-Type: application\/json; charset=windows-1251\r\n/,
         "$s: the first answer is in the backend's X-Accel-Charset");
    main::same_answer($s, $key, $f, $r, "$s X-Accel-Charset");
}
--- request
POST /s/orders?charset=utf-8&accel_charset=windows-1251
x
--- more_headers
Idempotency-Key: t075-12-s
--- error_code: 201
--- response_headers
Idempotent-Replayed: true
X-Tier: shm
Content-Type: application/json; charset=windows-1251
!X-Accel-Charset
--- no_error_log
[error]
