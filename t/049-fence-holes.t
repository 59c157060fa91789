# The fence decides every re-run, and a retry ends on the operation's own
# answer (issue 43): the holes and dead ends of the fence of t/048, each
# through real nginx, MariaDB and the bank of backend/withdraw.py (a
# MariaDB transaction that marks its execution first):
#
# - an attempt that committed and whose answer was lost (the app's 503
#   after COMMIT, a sidecar's 504, an operator who released the key) is
#   fenced before the key runs again: the money leaves once, and the
#   retry gets the withdrawal's own 201 (a find);
# - a marker is named by the key's use: after a purge the key runs anew,
#   and two stores sharing the marker table never see each other's;
# - a find the backend cannot answer (404) leaves the key executed (410);
# - attempts that never answer stop at idempotency_max_attempts;
# - a marker state neither writer writes is never read as "fenced";
# - the operator API forgets an executed key;
# - with find=off, a dead owner's executed epoch answers 409 while its
#   owner may still complete, not 410 at once;
# - a client's epoch header never passes an internal redirect.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;
use TierTest;
use POSIX ();
use Bank '049';

our $SIDECAR = TierTest::free_port();
our $OTHER = 'keys_t049_other';

IdemTest::sql_root($ENV{TEST_NGINX_MYSQL_SOCKET},
    "DROP TABLE IF EXISTS $OTHER; CREATE TABLE $OTHER LIKE idempotency_keys");

sub fence_location {
    my ($path, %o) = @_;
    my $fence = $o{fence} // 'main';
    my $pass = $o{pass} // "http://127.0.0.1:$Bank::PORT";
    my $extra = $o{extra} // '';
    return qq{
    location $path {
        idempotency @{[ $o{store} // 'main' ]};
        idempotency_fence $fence;
        idempotency_lease @{[ $o{lease} // '6s' ]};
        idempotency_epoch_header Idempotency-Epoch;
        proxy_set_header Idempotency-Marker \$idempotency_marker;
        proxy_read_timeout @{[ $o{read_timeout} // '1s' ]};
        proxy_pass $pass;
        add_header X-Idem \$idempotency_status always;
        $extra
    }
};
}

sub config {
    my (%l) = @_;
    return fence_location('/withdraw', %l)
         . fence_location('/sidecar/withdraw',
                          pass => "http://127.0.0.1:$SIDECAR/withdraw",
                          read_timeout => '10s', %l)
         . fence_location('/other/withdraw', store => 'other',
                          pass => "http://127.0.0.1:$Bank::PORT/withdraw", %l)
         . fence_location('/few/withdraw',
                          pass => "http://127.0.0.1:$Bank::PORT/withdraw",
                          extra => 'idempotency_max_attempts 2;', %l)
         . fence_location('/nofind/withdraw', fence => 'main find=off',
                          pass => "http://127.0.0.1:$Bank::PORT/withdraw", %l)
         . qq{
    location /a {
        idempotency main;
        try_files /nonexistent \@b;
    }
    location \@b {
        idempotency main;
        idempotency_epoch_header X-Epoch;
        proxy_pass http://127.0.0.1:$SIDECAR;
    }
    location = /admin { idempotency_admin main; }
    location = /t { return 200 "checked\\n"; }
};
}

sub http_config {
    my (%o) = @_;
    return IdemTest::store_config(%o)
         . "idempotency_store other mysql=127.0.0.1:\$TEST_NGINX_MYSQL_PORT"
         . " user=\$TEST_NGINX_MYSQL_USER password=\$TEST_NGINX_MYSQL_PASSWORD"
         . " database=\$TEST_NGINX_MYSQL_DB table=$OTHER;\n"
         . qq{
server {
    listen 127.0.0.1:$SIDECAR;
    location /withdraw {
        proxy_pass http://127.0.0.1:$Bank::PORT;
        proxy_read_timeout 1s;
    }
    location /a { return 200 "epoch=[\$http_x_epoch]\\n"; }
}
};
}

# the operator's view of a key, and a change on the version read
sub operator {
    my ($method, $args) = @_;
    my $r = TierTest::http_req(method => $method, uri => "/admin?$args");
    $r->{json} = eval { JSON::PP::decode_json($r->{body}) } // {};
    return $r;
}

block_defaults(http_config => http_config(), config => config(),
               request => "GET /t", error_code => 200, timeout => 60);

no_shuffle();
run_tests();

__DATA__

=== TEST 1: the app answers 503 after its COMMIT (the commit's answer lost): the retry is fenced, finds the withdrawal and gets its own 201; the money left once
--- init
my $k = 't049-1';
main::open_account($k);
my $r = main::withdraw($k, 'lose=commit');
is($r->{status}, 503, 'the first client: the app\'s 503');
is(main::hdr($r, 'X-Idem'), 'new', '... a new claim');
wait_state($k, 4);
is(main::ledger($k), '90 1', 'the withdrawal committed');
$r = main::withdraw($k);
is($r->{status}, 201, 'the retry: 201');
is(main::hdr($r, 'X-Idem'), 'find', '... the backend\'s own answer (find)');
like($r->{body}, qr/^\{"withdrawal":\d+,"account":"t049-1","amount":10,"balance":90,"epoch":1\}$/,
     '... of the withdrawal at epoch 1');
my $first = $r->{body};
$r = main::withdraw($k);
is("$r->{status} " . main::hdr($r, 'Idempotent-Replayed'), '201 true',
   'the next retry: the replay');
is($r->{body}, $first, '... the same answer');
is(main::markers($k), '1:1', 'one marker, the backend\'s');
is(main::ledger($k), '90 1', 'one withdrawal');



=== TEST 2: a sidecar's 504 after the app committed: released as a 5xx, then fenced and found; once
--- init
my $k = 't049-2';
main::open_account($k);
my $r = main::withdraw($k, 'pause=2500&pause_at=commit', { prefix => '/sidecar' });
is($r->{status}, 504, 'the first client: the sidecar\'s 504');
wait_state($k, 4);
main::wait_bank_log('the withdrawal to answer after its commit',
    qr/resume at commit marker=\w+ epoch=1/);
$r = main::withdraw($k, { prefix => '/sidecar' });
is($r->{status}, 201, 'the retry: 201');
is(main::hdr($r, 'X-Idem'), 'find', '... found');
like($r->{body}, qr/"balance":90,"epoch":1\}$/, '... the first withdrawal\'s');
is(main::ledger($k), '90 1', 'one withdrawal');



=== TEST 3: an operator releases a key whose withdrawal did commit: the retry is fenced and found, never run again
--- init
my $k = 't049-3';
main::open_account($k);
my $r = main::withdraw($k, 'pause=2000&pause_at=commit');
is($r->{status}, 504, 'the first client: nginx\'s 504');
wait_state($k, 3);
main::wait_bank_log('the commit', qr/marker=\w+ epoch=1 committed/);
my $j = main::operator('GET', "key=$k")->{json};
is($j->{state}, 'unknown', 'the operator sees it unknown');
is(main::operator('POST', "action=release&key=$k&version=$j->{version}")->{status},
   200, '... and releases it');
$r = main::withdraw($k);
is($r->{status}, 201, 'the retry: 201');
is(main::hdr($r, 'X-Idem'), 'find', '... found, not run');
is(main::ledger($k), '90 1', 'one withdrawal');



=== TEST 4: a key purged, then used anew for another withdrawal: its marker is another, and it runs
--- init
my $k = 't049-4';
main::open_account($k);
my $r = main::withdraw($k);
is($r->{status}, 201, 'the first use: 201');
my $m1 = marker_hex($k);
is(main::markers($k, $m1), '1:1', 'its marker');
# the purge deletes the row once its retention has ended
sql("DELETE FROM idempotency_keys WHERE key_hash = X'" . key_hash_hex($k) . "'");
$r = TierTest::http_req(key => $k, uri => "/withdraw?account=$k&amount=20",
                        body => 'x', timeout => 20);
is($r->{status}, 201, 'the key used anew: 201');
is(main::hdr($r, 'X-Idem'), 'new', '... a new claim, at epoch 1');
like($r->{body}, qr/"amount":20,"balance":70,"epoch":1\}$/,
     '... the new withdrawal, not the old one\'s answer');
isnt(marker_hex($k), $m1, 'its marker is another');
is(main::markers($k, $m1), '1:1', 'the old use\'s marker is untouched');
is(main::markers($k), '1:1', 'the new use\'s own');
is(main::ledger($k), '70 1,1', 'two withdrawals, one per use');



=== TEST 5: two stores share one marker table: the same key runs once in each, neither sees the other's marker
--- init
my $k = 't049-5';
main::open_account($k);
my $r = main::withdraw($k);
is($r->{status}, 201, 'store main: 201');
$r = main::withdraw($k, { prefix => '/other' });
is($r->{status}, 201, 'store other: 201, its own withdrawal');
like($r->{body}, qr/"balance":80,"epoch":1\}$/, '... the second one');
is(main::ledger($k), '80 1,1', 'one withdrawal per store');



=== TEST 6: a find the backend cannot answer (its record gone): 404 to the finder, then 410 outcome-executed, never a second withdrawal
--- init
my $k = 't049-6';
main::killed($k, 'commit');
sql("DELETE FROM withdrawals WHERE account = '$k'");
my $r = main::withdraw($k);
is($r->{status}, 404, 'the finder: the backend\'s 404');
is(main::hdr($r, 'X-Idem'), 'find', '... of a find');
wait_state($k, 5);
$r = main::withdraw($k);
is($r->{status}, 410, 'the next retry: 410');
like($r->{body}, qr/outcome-executed.*"result":"\/withdrawals\/\d+"/,
     '... outcome-executed with the marker\'s result');
is(main::markers($k), '1:1', 'the backend\'s marker only');
--- error_log
answered the find of key



=== TEST 7: attempts that never answer stop at idempotency_max_attempts: 504 attempts-exhausted, and none of them ran
--- init
my $k = 't049-7';
main::open_account($k);
my $p = { prefix => '/few' };
my $r = main::withdraw($k, 'pause=3000', $p);
is($r->{status}, 504, 'attempt 1: 504');
wait_state($k, 3);
$r = main::withdraw($k, 'pause=3000', $p);
is("$r->{status} " . main::hdr($r, 'X-Idem'), '504 takeover',
   'attempt 2 (epoch 1 fenced): 504 again');
wait_state($k, 3);
$r = main::withdraw($k, $p);
is($r->{status}, 504, 'the next retry: 504');
like($r->{body}, qr/"type":"urn:ngx-idempotency:problem:attempts-exhausted"/,
     '... attempts-exhausted');
is(main::hdr($r, 'X-Should-Retry'), 'false', '... not worth retrying');
is(main::hdr($r, 'X-Idem'), 'exhausted', '... $idempotency_status');
main::wait_bank_log('both attempts to resume and be refused',
    qr/epoch=2 is fenced or ran: rolled back/);
is(main::markers($k), '1:2,2:2', 'both epochs fenced');
is(main::ledger($k), '100 NULL', 'no withdrawal');
--- error_log
was attempted 2 times without an answer



=== TEST 8: a marker in a state neither writer writes is undecided, never "fenced": the key does not run
--- init
my $k = 't049-8';
main::open_account($k);
my $kh = main::orphan_row($k, 3);
sql("INSERT INTO idempotency_fence (marker, epoch, state, created_at)"
    . " VALUES (X'$kh', 1, 7, UTC_TIMESTAMP(3))");
my $r = main::withdraw($k);
is($r->{status}, 502, 'the retry: 502');
like($r->{body}, qr/outcome-unknown/, '... outcome-unknown');
is(main::hdr($r, 'Retry-After'), '1', '... worth retrying');
is(main::ledger($k), '100 NULL', 'not run');
--- error_log
has state "7", neither 1 (executed) nor 2 (fenced)



=== TEST 9: find=off: an executed key is recorded so (410), and the operator API can forget it
--- init
my $k = 't049-9';
main::open_account($k);
my $r = main::withdraw($k, 'die=commit', { prefix => '/nofind' });
is($r->{status}, 502, 'killed after COMMIT: 502');
wait_state($k, 3);
main::restart_bank();
$r = main::withdraw($k, { prefix => '/nofind' });
is($r->{status}, 410, 'find=off: 410 outcome-executed');
wait_state($k, 5);
my $j = main::operator('GET', "key=$k")->{json};
is($j->{state}, 'executed', 'the operator sees it executed');
my $x = main::operator('POST', "action=forget&key=$k&version=$j->{version}");
is($x->{status}, 200, '... and forgets it');
is(main::operator('GET', "key=$k")->{json}{state}, 'released', '... released');



=== TEST 10: find=off, a dead owner whose epoch committed: 409 while its owner may still store the answer, not 410 at once
--- init
my $k = 't049-10';
main::open_account($k);
main::orphan_row($k, 0, "/nofind/withdraw?account=$k&amount=10");
my $pid = main::old_execution($k, 'pause=1000&pause_at=marker', 'marker');
waitpid($pid, 0);
is(main::ledger($k), '90 1', 'the old execution committed');
my $r = main::withdraw($k, { prefix => '/nofind' });
is($r->{status}, 409, 'the retry: 409, worth retrying');
is(main::hdr($r, 'Retry-After'), '1', '... Retry-After: 1');
wait_state($k, 5);
is(sql("SELECT lease_until > UTC_TIMESTAMP(3) + INTERVAL 50 SECOND FROM"
       . " idempotency_keys WHERE key_hash = X'" . key_hash_hex($k) . "'"),
   "1\n", 'executed, and answered as in progress for the owner\'s window');
$r = main::withdraw($k, { prefix => '/nofind' });
is($r->{status}, 409, 'the next retry: 409 still');



=== TEST 11: a client's epoch header never reaches a location's upstream through an internal redirect
--- request
POST /a
x
--- more_headers
X-Epoch: 999
--- response_body
epoch=[]



=== TEST 12: a fence storm on the keys' own store: fences past a quarter of the pool are undecided at once, and another key's claim, renewals and completion go on
--- http_config eval
main::http_config(pool => 4, query_timeout => '4s')
--- init
my @stuck = map { "t049-12-$_" } 1 .. 6;
my @pids;
for my $k (@stuck) {
    main::open_account($k);
    main::orphan_row($k, 3);
    # each epoch 1 holds its marker (uncommitted) for 5 s
    push @pids, main::old_execution($k, 'pause=5000&pause_at=marker', 'marker');
}
my $other = 't049-12-other';
my $slow = IdemTest::bg_request('POST', '/orders?delay=3000', $other, 'x', 0);
my @retries;
for my $k (@stuck) {
    push @retries, IdemTest::bg_request('POST', "/withdraw?account=$k&amount=10",
                                        $k, 'x', 0);
}
waitpid($_, 0) for @retries;
waitpid($slow, 0);
waitpid($_, 0) for @pids;
is(sql("SELECT state FROM idempotency_keys WHERE key_hash = X'"
       . key_hash_hex($other) . "'"), "1\n",
   'the other key completed meanwhile');
my $r = TierTest::http_req(key => $other, uri => '/orders?delay=3000',
                           body => 'x');
is("$r->{status} " . main::hdr($r, 'Idempotent-Replayed'), '201 true',
   '... and is replayed');
for my $k (@stuck) {
    $r = main::withdraw($k);
    is($r->{status}, 201, "$k: once its marker committed, found");
}
--- config eval
main::config(lease => '12s')
. IdemTest::orders_location(idempotency_lease => '12s')
--- error_log
fences in flight (a quarter of its connections, pool=)
--- no_error_log
lease lost



=== TEST 13: a fence whose client left counts against the bound only until it ends: the next retries fence again, and find the answer
--- http_config eval
main::http_config(pool => 4, query_timeout => '4s')
--- config eval
main::config(lease => '12s')
--- init
my $k = 't049-13';
main::open_account($k);
main::orphan_row($k, 3);
# epoch 1 holds its marker 4 s, then commits
my $pid = main::old_execution($k, 'pause=4000&pause_at=marker', 'marker');
# a retry whose client gives up while its fence waits for the lock
system('curl', '-s', '-o', '/dev/null', '--max-time', '0.5', '-X', 'POST',
       '-H', "Idempotency-Key: $k", '--data-binary', 'x',
       'http://127.0.0.1:' . IdemTest::port()
       . "/withdraw?account=$k&amount=10");
waitpid($pid, 0);
is(main::ledger($k), '90 1', 'TEST 13: the old execution committed');
my $r = main::withdraw($k);
is($r->{status}, 201, 'TEST 13: the next retry fences, finds, and gets its 201');
is(main::hdr($r, 'X-Idem'), 'find', 'TEST 13: ... a find');
--- request
GET /t
--- response_body
checked
--- no_error_log
fences in flight
