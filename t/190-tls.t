# TLS to MySQL (idempotency_store ssl=, ssl_ca=, ssl_cert=, ssl_key=):
# against a private MariaDB with a certificate from a test CA and accounts
# that REQUIRE SSL (so a claim that works went over TLS), ssl=verify and
# ssl=on claim and replay; a certificate from another CA, a certificate
# for another name, a server without TLS and ssl=off against a TLS-only
# account are a store that is down (503) with a readable error.log line;
# a slow TLS handshake does not hold the worker; and "nginx -t" rejects
# the inconsistent parameters.

use strict;
use warnings;

use File::Path qw(make_path remove_tree);
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

use lib 't/stress';
use IdemStress;

IdemStress::begin_file();
plan skip_all => 'no openssl command' if system('openssl version >/dev/null');

my $P = port(191);          # nginx "tls"
my $P2 = port(192);         # nginx "tls-slow", one worker
my $RELAY = port(310);      # slow relay to the TLS MariaDB
my $tag = "t$$-" . int(time);
my $dir = "$IdemStress::DIR/tls-certs";
my $pw = 'idem-secret';
my ($db, $ngx, $slow, $relay);

END {
    kill 'KILL', $relay if $relay;
    waitpid($relay, 0) if $relay;
    $slow->stop if $slow;
    $ngx->stop if $ngx;
    $db->stop if $db;
}

# ------------------------------------------------------------ certificates

remove_tree($dir);
make_path($dir);

sub openssl {
    my ($args) = @_;
    my $out = `openssl $args 2>&1`;
    die "openssl $args:\n$out" if $?;
}

# a CA; a certificate it signs for $subj with the alternative names $san
sub ca {
    my ($name) = @_;
    openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
            . " -nodes -days 2 -subj '/CN=idem test $name'"
            . " -addext basicConstraints=critical,CA:TRUE"
            . " -addext keyUsage=critical,keyCertSign,cRLSign"
            . " -keyout $dir/$name.key -out $dir/$name.pem");
}

sub cert {
    my ($ca, $name, $cn, $san) = @_;
    IdemStress::write_file("$dir/$name.ext",
        "basicConstraints=CA:FALSE\n"
        . ($san ? "subjectAltName=$san\n" : ''));
    openssl("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
            . " -subj '/CN=$cn' -keyout $dir/$name.key -out $dir/$name.csr");
    openssl("x509 -req -in $dir/$name.csr -CA $dir/$ca.pem"
            . " -CAkey $dir/$ca.key -CAcreateserial -days 2"
            . " -extfile $dir/$name.ext -out $dir/$name.pem");
}

ca('ca');
ca('other-ca');
cert('ca', 'server', '127.0.0.1', 'IP:127.0.0.1,DNS:localhost');
cert('ca', 'client', 'idem client', '');
cert('ca', 'wrong-name', 'db.example.org', 'DNS:db.example.org');

# ---------------------------------------------------------------- MariaDB

# the files the server reads; FLUSH SSL later reads other contents
for my $f (qw(pem key)) {
    IdemStress::write_file("$dir/live.$f",
                           IdemStress::read_file("$dir/server.$f"));
}

$db = IdemStress::DB->new(name => 'tlsdb', port => port(309),
                          user => 'idemtls', password => $pw, args => [
    "--ssl-ca=$dir/ca.pem", "--ssl-cert=$dir/live.pem",
    "--ssl-key=$dir/live.key",
]);
$db->start(fresh => 1);

$db->root_sql(<<"SQL");
ALTER USER 'idemtls'\@'127.0.0.1' REQUIRE SSL;
ALTER USER 'idemtls'\@'localhost' REQUIRE SSL;
CREATE USER IF NOT EXISTS 'idemx509'\@'127.0.0.1' IDENTIFIED BY '$pw';
ALTER USER 'idemx509'\@'127.0.0.1' REQUIRE X509;
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency.*
    TO 'idemx509'\@'127.0.0.1';
FLUSH PRIVILEGES;
SQL

like($db->root_sql("SHOW GLOBAL VARIABLES LIKE 'have_ssl'"), qr/YES/,
     'the private MariaDB has TLS');

sub ssl_accepts {
    my $out = $db->root_sql("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'");
    return $out =~ /(\d+)/ ? $1 : die "Ssl_accepts: $out\n";
}

# ------------------------------------------------------------------ nginx

sub store {
    my ($name, $port, %p) = @_;
    return store_line($name, $port, user => 'idemtls', password => $pw,
                      database => 'idempotency', %p);
}

my %loc = (
    verify => store('verify', $db->{port}, ssl => 'verify',
                    ssl_ca => "$dir/ca.pem"),
    on => store('on', $db->{port}, ssl => 'on'),
    x509 => store('x509', $db->{port}, user => 'idemx509', ssl => 'verify',
                  ssl_ca => "$dir/ca.pem", ssl_cert => "$dir/client.pem",
                  ssl_key => "$dir/client.key"),
    otherca => store('otherca', $db->{port}, ssl => 'verify',
                     ssl_ca => "$dir/other-ca.pem"),
    plain => store('plain', $db->{port}),
    notls => store('notls', $ENV{TEST_NGINX_MYSQL_PORT} || 3307, ssl => 'on',
                   user => $ENV{TEST_NGINX_MYSQL_USER} || 'idem',
                   password => $ENV{TEST_NGINX_MYSQL_PASSWORD}
                               || 'idem-secret'),
    # first used after the server's certificate changed its name
    name => store('name', $db->{port}, ssl => 'verify',
                  ssl_ca => "$dir/ca.pem"),
    onca => store('onca', $db->{port}, ssl => 'on', ssl_ca => "$dir/ca.pem"),
);

my $locations = join '', map { <<"LOC" } sort keys %loc;
        location /$_/ {
            idempotency $_;
            proxy_pass http://backend/;
            add_header X-Idem \$idempotency_status always;
        }
LOC

$ngx = IdemStress::Nginx->start(name => 'tls', port => $P, workers => 1,
    http => join('', map { $loc{$_} } sort keys %loc)
            . server_block($P, $locations));

sub idem { IdemStress::hdr($_[0], 'X-Idem') // '-' }

sub store_down {
    my ($r) = @_;
    return $r->{status} == 503
           && (IdemStress::hdr($r, 'Content-Type') // '')
              eq 'application/problem+json'
           && ($r->{body} // '') =~ /store-unavailable/;
}

sub log_line {
    my ($store) = @_;
    my ($l) = grep { /store "\Q$store\E" mysql=\S+: connect failed/ }
              split /\n/, $ngx->error_log;
    return $l // '';
}

# 1. ssl=verify: executed once, replayed byte for byte, over TLS

my $accepts = ssl_accepts();

my $k1 = "$tag-verify";
my $r1 = post($P, '/verify/orders', $k1);
my $r2 = post($P, '/verify/orders', $k1);
is("$r1->{status} " . idem($r1), '201 new',
   'ssl=verify: the first request is executed');
is("$r2->{status} " . idem($r2) . ' '
   . (IdemStress::hdr($r2, 'Idempotent-Replayed') // '-'),
   '201 replay true', 'ssl=verify: the duplicate is replayed');
is($r2->{body}, $r1->{body}, 'ssl=verify: the replay is byte for byte');
is(backend_count($k1), 1, 'ssl=verify: executed once');
cmp_ok(ssl_accepts(), '>', $accepts,
       'ssl=verify: the server accepted TLS connections');

# 2. ssl=on, no CA

my $k2 = "$tag-on";
my $o1 = post($P, '/on/orders', $k2);
my $o2 = post($P, '/on/orders', $k2);
is(idem($o1) . ' ' . idem($o2), 'new replay', 'ssl=on: new, then replay');
is(backend_count($k2), 1, 'ssl=on: executed once');

# a client certificate, for an account that REQUIRE X509

my $k3 = "$tag-x509";
my $x1 = post($P, '/x509/orders', $k3);
my $x2 = post($P, '/x509/orders', $k3);
is(idem($x1) . ' ' . idem($x2), 'new replay',
   'ssl_cert= and ssl_key=: an account that requires a client '
   . 'certificate: new, then replay');

# 3. a certificate from another CA

my $k4 = "$tag-otherca";
ok(store_down(post($P, '/otherca/orders', $k4)),
   'ssl=verify, the server certificate from another CA: 503 '
   . 'store-unavailable');
is(backend_count($k4), 0, '... and the backend never saw it');
like(log_line('otherca'),
     qr/connect failed: \(2026\) (TLS\/)?SSL .*error: .*certificate/,
     '... error.log says why: ' . log_line('otherca'));

# 4. ssl=off against an account that requires TLS

ok(store_down(post($P, '/plain/orders', "$tag-plain")),
   'ssl=off against a REQUIRE SSL account: 503 store-unavailable');
like(log_line('plain'), qr/connect failed: \(1045\) Access denied/,
     '... error.log: ' . log_line('plain'));

# ssl=on against a server without TLS: Connector/C would go on in clear

ok(store_down(post($P, '/notls/orders', "$tag-notls")),
   'ssl=on against a server without TLS: 503 store-unavailable');
like(log_line('notls'),
     qr/connect failed: \(2026\) TLS is required .* does not offer it/,
     '... error.log: ' . log_line('notls'));

# the name: a certificate from the right CA, for another name

for my $f (qw(pem key)) {
    IdemStress::write_file("$dir/live.$f",
                           IdemStress::read_file("$dir/wrong-name.$f"));
}
$db->root_sql('FLUSH SSL');

ok(store_down(post($P, '/name/orders', "$tag-name")),
   'ssl=verify, a certificate of the right CA for another name: 503');
like(log_line('name'),
     qr/connect failed: \(2026\) (TLS\/)?SSL .*error: .*certificate/,
     '... error.log: ' . log_line('name'));

my $k5 = "$tag-onca";
is(idem(post($P, '/onca/orders', $k5)), 'new',
   'ssl=on with ssl_ca=: the chain is verified, not the name');

my $bad = qr/\[(alert|crit|emerg)\]|exited on signal/;
ok($ngx->error_log !~ $bad, 'no alert, crit or crash in error.log');
$ngx->stop;
undef $ngx;

for my $f (qw(pem key)) {
    IdemStress::write_file("$dir/live.$f",
                           IdemStress::read_file("$dir/server.$f"));
}
$db->root_sql('FLUSH SSL');

# Connector/C 3.3 is not non-blocking with TLS by itself: the module
# keeps the worker free.  A claim runs in a child process while the one
# worker is pinged; returns (the child's status, pings, the longest
# ping, the claim's duration).  $unlock: unlock the table after so long.

sub claim_and_ping {
    my ($port, $uri, $key, $unlock) = @_;

    my $child = fork // die "fork: $!";

    if ($child == 0) {
        my $r = post($port, $uri, $key);
        POSIX::_exit(($r->{status} // 0) == 201 && idem($r) eq 'new' ? 0 : 1);
    }

    my ($n, $worst, $t0) = (0, 0, time);

    while (waitpid($child, POSIX::WNOHANG()) == 0) {
        $db->unlock_table if $unlock && $db->{lock} && time - $t0 > $unlock;

        my $t = time;
        http_one(port => $port, method => 'GET', uri => '/ping',
                 timeout => 10);
        $worst = time - $t if time - $t > $worst;
        $n++;

        die "the claim did not end\n" if time - $t0 > 60;
        sleep 0.02;
    }

    return ($?, $n, $worst, time - $t0);
}

my $slow_http = server_block($P2, <<"SERVER");
        location /orders {
            idempotency slow;
            proxy_pass http://backend;
            add_header X-Idem \$idempotency_status always;
        }

        location = /ping { return 200 "pong\\n"; }
SERVER

# a query that waits (a locked table) on a TLS connection: SSL_read()
# must suspend, not wait in the worker

$slow = IdemStress::Nginx->start(name => 'tls-slow', port => $P2,
    workers => 1, http => store('slow', $db->{port}, ssl => 'verify',
                                ssl_ca => "$dir/ca.pem",
                                query_timeout => '5s') . $slow_http);

is(idem(post($P2, '/orders', "$tag-warm")), 'new',
   'a TLS connection is made (and kept)');

$db->lock_table;
my ($st, $n, $worst, $took) = claim_and_ping($P2, '/orders', "$tag-lock", 1);

is($st, 0, 'a claim that waits 1s for a locked table, over TLS: executed');
cmp_ok($worst, '<', 0.25,
       sprintf('... and meanwhile the worker answered %d other requests,'
               . ' none waited (worst %.3fs, the claim took %.1fs)',
               $n, $worst, $took));

$slow->stop;
undef $slow;

# a slow server (a relay that holds each chunk 0.3s): everything but the
# server's part of the TLS handshake is suspended in _start/_cont; that
# one wait is Connector/C's own poll(), bounded by connect_timeout

$relay = IdemStress::tcp_proxy($RELAY, $db->{port}, 0.3);

$slow = IdemStress::Nginx->start(name => 'tls-slow', port => $P2,
    workers => 1, http => store('slow', $RELAY, ssl => 'verify',
                                ssl_ca => "$dir/ca.pem",
                                connect_timeout => '20s',
                                query_timeout => '5s') . $slow_http);

($st, $n, $worst, $took) = claim_and_ping($P2, '/orders', "$tag-relay");

is($st, 0, 'through a slow relay, a claim on a new TLS connection: '
           . 'executed');
cmp_ok($worst, '<', $took / 2,
       sprintf('... and the worker was held only for the handshake: it'
               . ' answered %d other requests, the longest waited %.3fs,'
               . ' the claim took %.1fs', $n, $worst, $took));
ok($slow->error_log !~ $bad, 'no alert, crit or crash in error.log');

# ------------------------------------------------------------- nginx -t

my $tdir = "$IdemStress::DIR/tls-conf";
make_path("$tdir/logs", "$tdir/conf/certs");
for my $f (qw(ca.pem client.pem client.key)) {
    IdemStress::write_file("$tdir/conf/certs/$f",
                           IdemStress::read_file("$dir/$f"));
}

sub nginx_t {
    my ($params) = @_;
    IdemStress::write_file("$tdir/conf/nginx.conf",
        "load_module $IdemStress::MODULE;\n"
        . "error_log $tdir/logs/error.log;\npid $tdir/logs/nginx.pid;\n"
        . "events {}\nhttp {\n    idempotency_store main"
        . " mysql=127.0.0.1:1 user=u database=d $params;\n}\n");
    my $cmd = "$IdemStress::NGINX -t -p $tdir/ -c $tdir/conf/nginx.conf"
              . " -e $tdir/logs/error.log";
    my $out = `$cmd 2>&1`;
    return ($? == 0, $out);
}

my @ok = (
    'ssl=verify ssl_ca=certs/ca.pem',
    'ssl=on',
    'ssl=off',
    "ssl=verify ssl_ca=$tdir/conf/certs/ca.pem"
    . ' ssl_cert=certs/client.pem ssl_key=certs/client.key',
);

for my $p (@ok) {
    my ($ok, $out) = nginx_t($p);
    ok($ok, "nginx -t accepts \"$p\"") or diag($out);
}

my @bad = (
    [ 'ssl=verify', qr/"main" has "ssl=verify" but no "ssl_ca="/ ],
    [ 'ssl_ca=certs/ca.pem',
      qr/has "ssl_\.\.\." parameters but "ssl=" is off/ ],
    [ 'ssl=off ssl_cert=certs/client.pem ssl_key=certs/client.key',
      qr/"ssl=" is off/ ],
    [ 'ssl=on ssl_cert=certs/client.pem',
      qr/needs both "ssl_cert=" and "ssl_key=", or neither/ ],
    [ 'ssl=on ssl_key=certs/client.key',
      qr/needs both "ssl_cert=" and "ssl_key=", or neither/ ],
    [ 'ssl=verify ssl_ca=certs/no-such.pem',
      qr/cannot open the "ssl_ca=" file "\Q$tdir\E\/conf\/certs\/no-such\.pem"/
      . qr/ of "idempotency_store" \(2: No such file or directory\)/ ],
    [ 'ssl=on ssl_cert=certs/client.pem ssl_key=/nonexistent/k.pem',
      qr/cannot open the "ssl_key=" file "\/nonexistent\/k\.pem"/ ],
    [ 'ssl=verify ssl_ca=certs', qr/"ssl_ca=" file .* is not a regular file/ ],
    [ 'ssl=verify ssl_ca=', qr/invalid "ssl_ca=" parameter/ ],
    [ 'ssl=yes', qr/invalid parameter "ssl=yes" in "idempotency_store"/ ],
);

for my $b (@bad) {
    my ($ok, $out) = nginx_t($b->[0]);
    ok(!$ok && $out =~ $b->[1], "nginx -t rejects \"$b->[0]\"")
        or diag($out);
}

done_testing();
