# TLS to MySQL (idempotency_store ssl=, ssl_ca=, ssl_cert=, ssl_key=):
# against a private MariaDB with a certificate from a test CA and accounts
# that REQUIRE SSL (so a claim that works went over TLS), ssl=verify and
# ssl=on claim and replay; a certificate from another CA, a certificate
# for another name, a server without TLS and ssl=off against a TLS-only
# account are a store that is down (503) with a readable error.log line;
# a slow TLS handshake does not hold the worker; and nginx rejects the
# inconsistent parameters.

use lib 't';
use Test::Nginx::Socket;
use IdemTest;
use File::Path qw(make_path remove_tree);
use POSIX ();
use Time::HiRes ();

plan skip_all => 'no openssl command' if system('openssl version >/dev/null');
IdemStress::begin_file();
plan 'no_plan';

our $OWNER = $$;
our $DIR = "$IdemStress::DIR/tls-certs";
our $PW = 'idem-secret';
our ($DB, $RELAY);

END {
    if ($$ == $OWNER) {
        kill 'KILL', $RELAY if $RELAY;
        waitpid($RELAY, 0) if $RELAY;
        $DB->stop if $DB;
    }
}

# ------------------------------------------------------------ certificates

remove_tree($DIR);
make_path($DIR);

sub openssl {
    my ($args) = @_;
    my $out = `openssl $args 2>&1`;
    die "openssl $args:\n$out" if $?;
}

# a CA; a certificate it signs for $cn with the alternative names $san
sub ca {
    my ($name) = @_;
    openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
            . " -nodes -days 2 -subj '/CN=idem test $name'"
            . " -addext basicConstraints=critical,CA:TRUE"
            . " -addext keyUsage=critical,keyCertSign,cRLSign"
            . " -keyout $DIR/$name.key -out $DIR/$name.pem");
}

sub cert {
    my ($ca, $name, $cn, $san) = @_;
    IdemStress::write_file("$DIR/$name.ext",
        "basicConstraints=CA:FALSE\n"
        . ($san ? "subjectAltName=$san\n" : ''));
    openssl("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
            . " -subj '/CN=$cn' -keyout $DIR/$name.key -out $DIR/$name.csr");
    openssl("x509 -req -in $DIR/$name.csr -CA $DIR/$ca.pem"
            . " -CAkey $DIR/$ca.key -CAcreateserial -days 2"
            . " -extfile $DIR/$name.ext -out $DIR/$name.pem");
}

ca('ca');
ca('other-ca');
cert('ca', 'server', '127.0.0.1', 'IP:127.0.0.1,DNS:localhost');
cert('ca', 'client', 'idem client', '');
cert('ca', 'wrong-name', 'db.example.org', 'DNS:db.example.org');

# the files the server reads ($name's certificate and key); FLUSH SSL
# makes it read them again
sub live_cert {
    my ($name) = @_;
    for my $f (qw(pem key)) {
        IdemStress::write_file("$DIR/live.$f",
                               IdemStress::read_file("$DIR/$name.$f"));
    }
    $DB->root_sql('FLUSH SSL') if $DB && $DB->pid;
}

# ---------------------------------------------------------------- MariaDB

live_cert('server');

$DB = IdemStress::DB->new(name => 'tlsdb', port => IdemTest::extra_port(309),
                          user => 'idemtls', password => $PW, args => [
    "--ssl-ca=$DIR/ca.pem", "--ssl-cert=$DIR/live.pem",
    "--ssl-key=$DIR/live.key",
]);
$DB->start(fresh => 1);

$DB->root_sql(<<"SQL");
ALTER USER 'idemtls'\@'127.0.0.1' REQUIRE SSL;
ALTER USER 'idemtls'\@'localhost' REQUIRE SSL;
CREATE USER IF NOT EXISTS 'idemx509'\@'127.0.0.1' IDENTIFIED BY '$PW';
ALTER USER 'idemx509'\@'127.0.0.1' REQUIRE X509;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency.*
    TO 'idemx509'\@'127.0.0.1';
FLUSH PRIVILEGES;
SQL

sub ssl_accepts {
    my $out = $DB->root_sql("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'");
    return $out =~ /(\d+)/ ? $1 : die "Ssl_accepts: $out\n";
}

# ------------------------------------------------------------------ nginx

# a store on the TLS server (or $port), as the account idemtls
sub store {
    my ($name, $port, %p) = @_;
    return IdemStress::store_line($name, $port, user => 'idemtls',
                                  password => $PW, database => 'idempotency',
                                  %p);
}

our %STORES = (
    verify => store('verify', $DB->{port}, ssl => 'verify',
                    ssl_ca => "$DIR/ca.pem"),
    on => store('on', $DB->{port}, ssl => 'on'),
    x509 => store('x509', $DB->{port}, user => 'idemx509', ssl => 'verify',
                  ssl_ca => "$DIR/ca.pem", ssl_cert => "$DIR/client.pem",
                  ssl_key => "$DIR/client.key"),
    otherca => store('otherca', $DB->{port}, ssl => 'verify',
                     ssl_ca => "$DIR/other-ca.pem"),
    plain => store('plain', $DB->{port}),
    notls => store('notls', $ENV{TEST_NGINX_MYSQL_PORT}, ssl => 'on',
                   user => $ENV{TEST_NGINX_MYSQL_USER},
                   password => $ENV{TEST_NGINX_MYSQL_PASSWORD}),
    # first used after the server's certificate changed its name
    name => store('name', $DB->{port}, ssl => 'verify',
                  ssl_ca => "$DIR/ca.pem"),
    onca => store('onca', $DB->{port}, ssl => 'on', ssl_ca => "$DIR/ca.pem"),
);

# a location /NAME/ for each store
our $LOCATIONS = CORE::join '', map { IdemTest::location("/$_/",
    idempotency => $_, proxy_pass => 'http://backend/', add_header => 'X-Idem') }
    sort keys %STORES;

# the nginx of the worker's blocks: one store "slow" on $port
sub slow_http {
    my ($port, %p) = @_;
    return store('slow', $port, ssl => 'verify', ssl_ca => "$DIR/ca.pem",
                 query_timeout => '5s', %p)
         . "upstream backend { server 127.0.0.1:$ENV{TEST_NGINX_BACKEND_PORT}; }\n";
}

our $SLOW_CONFIG = IdemTest::orders_location(idempotency => 'slow',
                                             add_header => 'X-Idem')
                 . "    location = /ping { return 200 \"pong\\n\"; }\n";

# Connector/C 3.3 is not non-blocking with TLS by itself: the module
# keeps the worker free.  A claim runs in a child process while the one
# worker is pinged; returns (the child's status, pings, the longest
# ping, the claim's duration).  $unlock: unlock the table after so long.
sub claim_and_ping {
    my ($uri, $key, $unlock) = @_;

    my $child = fork // die "fork: $!";

    if ($child == 0) {
        POSIX::_exit(idem_of(post_key($uri, $key)) eq '201 new' ? 0 : 1);
    }

    my ($n, $worst, $t0) = (0, 0, Time::HiRes::time());

    while (waitpid($child, POSIX::WNOHANG()) == 0) {
        $DB->unlock_table
            if $unlock && $DB->{lock} && Time::HiRes::time() - $t0 > $unlock;

        my $t = Time::HiRes::time();
        IdemStress::http_one(port => port(), method => 'GET', uri => '/ping',
                             timeout => 10);
        my $dt = Time::HiRes::time() - $t;
        $worst = $dt if $dt > $worst;
        $n++;

        die "the claim did not end\n" if Time::HiRes::time() - $t0 > 60;
        Time::HiRes::sleep(0.02);
    }

    return ($?, $n, $worst, Time::HiRes::time() - $t0);
}

# the configuration blocks' certificates, under the server root's conf/
# (relative ssl_ files are found there)
sub conf_certs {
    my $d = "$ENV{TEST_NGINX_SERVER_ROOT}/conf/certs";
    make_path($d);
    IdemStress::write_file("$d/$_", IdemStress::read_file("$DIR/$_"))
        for qw(ca.pem client.pem client.key);
}

# a store line of the configuration blocks, its parameters after these
sub conf_store {
    return "idempotency_store main mysql=127.0.0.1:1 user=u database=d $_[0];\n";
}

# the store's log line of a failed connection
sub connect_failed {
    my ($store, $why) = @_;
    return qr/store "\Q$store\E" mysql=\S+: connect failed: $why/;
}

# the log of a failed connection comes before the block's last request;
# the blocks that expect nginx to refuse its configuration have their own
# no_error_log (the refusal is an [emerg])
check_accum_error_log();

no_shuffle();
block_defaults(
    http_config => CORE::join('', map { $STORES{$_} } sort keys %STORES)
                   . "upstream backend { server 127.0.0.1:\$TEST_NGINX_BACKEND_PORT; }\n",
    config => $LOCATIONS . "    location = /count { proxy_pass http://backend/__count; }\n",
    no_error_log => "[emerg]\n");
run_tests();

__DATA__

=== TEST 1: ssl=verify: the server has TLS; the first request is executed, the duplicate replayed byte for byte, over TLS connections; executed once
--- init
like($main::DB->root_sql("SHOW GLOBAL VARIABLES LIKE 'have_ssl'"), qr/YES/,
     'the private MariaDB has TLS');
my $accepts = main::ssl_accepts();
my $r1 = post_key('/verify/orders', 't190-verify');
my $r2 = post_key('/verify/orders', 't190-verify');
is(idem_of($r1), '201 new', 'ssl=verify: the first request is executed');
is(idem_of($r2) . ' ' . (IdemStress::hdr($r2, 'Idempotent-Replayed') // '-'),
   '201 replay true', 'ssl=verify: the duplicate is replayed');
is($r2->{body}, $r1->{body}, 'ssl=verify: the replay is byte for byte');
cmp_ok(main::ssl_accepts(), '>', $accepts,
       'ssl=verify: the server accepted TLS connections');
--- more_headers
Idempotency-Key: t190-verify
--- request eval
["POST /verify/orders\nx", "GET /count?key=t190-verify"]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: replay", ""]
--- response_body_like eval
['"execution":1,', '^1$']



=== TEST 2: ssl=on, no CA: new, then replay; executed once
--- more_headers
Idempotency-Key: t190-on
--- request eval
["POST /on/orders\nx", "POST /on/orders\nx", "GET /count?key=t190-on"]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1,', '"execution":1,', '^1$']



=== TEST 3: ssl_cert= and ssl_key=: an account that requires a client certificate: new, then replay
--- more_headers
Idempotency-Key: t190-x509
--- request eval
["POST /x509/orders\nx", "POST /x509/orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: replay"]



=== TEST 4: ssl=verify, the server certificate from another CA: 503 store-unavailable, the backend never saw it, and error.log says why
--- more_headers
Idempotency-Key: t190-otherca
--- request eval
["POST /otherca/orders\nx", "GET /count?key=t190-otherca"]
--- error_code eval
[503, 200]
--- response_headers eval
["Content-Type: application/problem+json", ""]
--- response_body_like eval
['store-unavailable', '^0$']
--- error_log eval
main::connect_failed('otherca', qr/\(2026\) (TLS\/)?SSL .*error: .*certificate/)



=== TEST 5: ssl=off against a REQUIRE SSL account: 503 store-unavailable, error.log: access denied
--- more_headers
Idempotency-Key: t190-plain
--- request
POST /plain/orders
x
--- error_code: 503
--- response_headers
Content-Type: application/problem+json
--- response_body_like: store-unavailable
--- error_log eval
main::connect_failed('plain', qr/\(1045\) Access denied/)



=== TEST 6: ssl=on against a server without TLS (Connector/C would go on in clear): 503 store-unavailable, error.log says TLS is required
--- more_headers
Idempotency-Key: t190-notls
--- request
POST /notls/orders
x
--- error_code: 503
--- response_headers
Content-Type: application/problem+json
--- response_body_like: store-unavailable
--- error_log eval
main::connect_failed('notls', qr/\(2026\) TLS is required .* does not offer it/)



=== TEST 7: ssl=verify, a certificate of the right CA for another name: 503 store-unavailable, and error.log says why
--- init
main::live_cert('wrong-name');
--- more_headers
Idempotency-Key: t190-name
--- request
POST /name/orders
x
--- error_code: 503
--- response_headers
Content-Type: application/problem+json
--- response_body_like: store-unavailable
--- error_log eval
main::connect_failed('name', qr/\(2026\) (TLS\/)?SSL .*error: .*certificate/)



=== TEST 8: ssl=on with ssl_ca=: the chain is verified, not the name
--- init
main::live_cert('wrong-name');
--- more_headers
Idempotency-Key: t190-onca
--- request
POST /onca/orders
x
--- error_code: 201
--- response_headers
X-Idem: new



=== TEST 9: a claim that waits 1 s for a locked table, over TLS, is executed, and meanwhile the one worker answers other requests, none waiting (SSL_read() suspends, it does not wait in the worker)
--- http_config eval
main::slow_http($main::DB->{port})
--- config eval
$main::SLOW_CONFIG
--- init
main::live_cert('server');
is(idem_of(post_key('/orders', 't190-warm')), '201 new',
   'a TLS connection is made (and kept)');

$main::DB->lock_table;
my ($st, $n, $worst, $took) = main::claim_and_ping('/orders', 't190-lock', 1);

is($st, 0, 'a claim that waits 1s for a locked table, over TLS: executed');
cmp_ok($worst, '<', 0.25,
       sprintf('... and meanwhile the worker answered %d other requests,'
               . ' none waited (worst %.3fs, the claim took %.1fs)',
               $n, $worst, $took));
--- request
GET /ping
--- response_body
pong



=== TEST 10: through a slow relay (each chunk held 0.3 s), a claim on a new TLS connection is executed, and the worker is held only for the server's part of the handshake (Connector/C's own poll(), bounded by connect_timeout)
--- http_config eval
main::slow_http(IdemTest::extra_port(310), connect_timeout => '20s')
--- config eval
$main::SLOW_CONFIG
--- init
main::live_cert('server');
$main::RELAY = tcp_proxy(IdemTest::extra_port(310), $main::DB->{port}, 0.3);

my ($st, $n, $worst, $took) = main::claim_and_ping('/orders', 't190-relay');

is($st, 0, 'through a slow relay, a claim on a new TLS connection: '
           . 'executed');
cmp_ok($worst, '<', $took / 2,
       sprintf('... and the worker was held only for the handshake: it'
               . ' answered %d other requests, the longest waited %.3fs,'
               . ' the claim took %.1fs', $n, $worst, $took));
--- request
GET /ping
--- response_body
pong
--- timeout: 10



=== TEST 11: nginx accepts "ssl=verify ssl_ca=certs/ca.pem" (relative to the configuration's folder)
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=verify ssl_ca=certs/ca.pem')
--- config
    location = /ping { return 200 "pong\n"; }
--- request
GET /ping
--- response_body
pong



=== TEST 12: nginx accepts "ssl=on"
--- http_config eval
main::conf_store('ssl=on')
--- config
    location = /ping { return 200 "pong\n"; }
--- request
GET /ping
--- response_body
pong



=== TEST 13: nginx accepts "ssl=off"
--- http_config eval
main::conf_store('ssl=off')
--- config
    location = /ping { return 200 "pong\n"; }
--- request
GET /ping
--- response_body
pong



=== TEST 14: nginx accepts an absolute ssl_ca= and a client certificate and key relative to the configuration's folder
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=verify ssl_ca=$TEST_NGINX_SERVER_ROOT/conf/certs/ca.pem'
                 . ' ssl_cert=certs/client.pem ssl_key=certs/client.key')
--- config
    location = /ping { return 200 "pong\n"; }
--- request
GET /ping
--- response_body
pong



=== TEST 15: nginx rejects "ssl=verify" without a CA
--- http_config eval
main::conf_store('ssl=verify')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
"main" has "ssl=verify" but no "ssl_ca="



=== TEST 16: nginx rejects ssl_ca= with ssl= off
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl_ca=certs/ca.pem')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
has "ssl_..." parameters but "ssl=" is off



=== TEST 17: nginx rejects "ssl=off" with a client certificate and key
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=off ssl_cert=certs/client.pem ssl_key=certs/client.key')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
"ssl=" is off



=== TEST 18: nginx rejects ssl_cert= without ssl_key=
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=on ssl_cert=certs/client.pem')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
needs both "ssl_cert=" and "ssl_key=", or neither



=== TEST 19: nginx rejects ssl_key= without ssl_cert=
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=on ssl_key=certs/client.key')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
needs both "ssl_cert=" and "ssl_key=", or neither



=== TEST 20: nginx rejects an ssl_ca= file that does not exist, and names it
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=verify ssl_ca=certs/no-such.pem')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log eval
qr/cannot open the "ssl_ca=" file "\Q$ENV{TEST_NGINX_SERVER_ROOT}\E\/conf\/certs\/no-such\.pem" of "idempotency_store" \(2: No such file or directory\)/



=== TEST 21: nginx rejects an ssl_key= file that does not exist, and names it
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=on ssl_cert=certs/client.pem ssl_key=/nonexistent/k.pem')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
cannot open the "ssl_key=" file "/nonexistent/k.pem"



=== TEST 22: nginx rejects an ssl_ca= that is a folder
--- post_setup_server_root
main::conf_certs();
--- http_config eval
main::conf_store('ssl=verify ssl_ca=certs')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log eval
qr/"ssl_ca=" file .* is not a regular file/



=== TEST 23: nginx rejects an empty ssl_ca=
--- http_config eval
main::conf_store('ssl=verify ssl_ca=')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
invalid "ssl_ca=" parameter



=== TEST 24: nginx rejects "ssl=yes"
--- http_config eval
main::conf_store('ssl=yes')
--- config
--- must_die
--- no_error_log
[alert]
--- error_log
invalid parameter "ssl=yes" in "idempotency_store"
