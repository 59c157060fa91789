# Directives: the module loads, and every bad value fails start-up with a
# message that names the directive and the value.

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();
run_tests();

__DATA__

=== TEST 1: a complete configuration loads
--- http_config
    idempotency_store main mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT mysql=unix:/tmp/none.sock
                      user=u password=p database=d table=keys_v1 pool=4
                      connect_timeout=500ms query_timeout=3s wait_queue=10;
--- config
    location /t {
        idempotency main;
        idempotency_methods POST PUT PATCH;
        idempotency_header X-Request-Key;
        idempotency_required on;
        idempotency_scope "$host:$http_x_tenant";
        idempotency_fingerprint off;
        idempotency_ttl 1h;
        idempotency_lease 10s;
        idempotency_wait 2s;
        idempotency_store_5xx on;
        idempotency_max_response_size 64k;
        idempotency_on_store_error pass;
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: a location that uses an undefined store
--- http_config
--- config
    location /t { idempotency nosuch; }
--- must_die
--- error_log
idempotency store "nosuch" is not defined



=== TEST 3: bad ttl
--- config
    location /t { idempotency main; idempotency_ttl forever; }
--- must_die
--- error_log
invalid value "forever" in "idempotency_ttl" directive



=== TEST 4: bad lease
--- config
    location /t { idempotency main; idempotency_lease 0; }
--- must_die
--- error_log
invalid value "0" in "idempotency_lease" directive



=== TEST 5: lease not shorter than the ttl
--- config
    location /t { idempotency main; idempotency_ttl 10s; idempotency_lease 10s; }
--- must_die
--- error_log
"idempotency_lease" (10000ms) must be shorter than "idempotency_ttl" (10s)



=== TEST 5b: a lease shorter than three query timeouts: a renewal could not fail once
--- config
    location /t { idempotency main; idempotency_lease 5s; }
--- must_die
--- error_log
"idempotency_lease" (5000ms) must be at least three times the query_timeout of idempotency store "main" (2000ms)



=== TEST 5c: the same check for a store defined after the location
--- http_config
upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
server {
    listen 127.0.0.1:1;
    location /t { idempotency late; idempotency_lease 1s; }
}
idempotency_store late mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT
                  user=$TEST_NGINX_MYSQL_USER password=$TEST_NGINX_MYSQL_PASSWORD
                  database=$TEST_NGINX_MYSQL_DB query_timeout=500ms;
--- config
--- must_die
--- error_log
"idempotency_lease" (1000ms) must be at least three times the query_timeout of idempotency store "late" (500ms)



=== TEST 5d: a lease of three query timeouts is accepted
--- http_config eval
IdemTest::store_config(query_timeout => '200ms')
--- config
    location /t { idempotency main; idempotency_lease 600ms; return 200 ok; }
--- request
GET /t
--- error_code: 200



=== TEST 6: bad method
--- config
    location /t { idempotency main; idempotency_methods POST FETCH; }
--- must_die
--- error_log
invalid method "FETCH" in "idempotency_methods" directive



=== TEST 7: bad store error policy
--- config
    location /t { idempotency main; idempotency_on_store_error ignore; }
--- must_die
--- error_log
invalid value "ignore" in "idempotency_on_store_error" directive



=== TEST 8: bad response size
--- config
    location /t { idempotency main; idempotency_max_response_size 1g; }
--- must_die
--- error_log
invalid value "1g" in "idempotency_max_response_size" directive



=== TEST 9: bad header name
--- config
    location /t { idempotency main; idempotency_header "Idem Key"; }
--- must_die
--- error_log
invalid value "Idem Key" in "idempotency_header" directive



=== TEST 10: store without a server
--- http_config
    idempotency_store main user=u database=d;
--- config
--- must_die
--- error_log
idempotency store "main" has no "mysql=" server



=== TEST 11: store with an unknown parameter
--- http_config
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d colour=blue;
--- config
--- must_die
--- error_log
unknown parameter "colour" in "idempotency_store"



=== TEST 11b: password_file: the password comes from a file, and a claim works with it
--- http_config
    idempotency_store main mysql=127.0.0.1:$TEST_NGINX_MYSQL_PORT
                      user=$TEST_NGINX_MYSQL_USER
                      password_file=../html/idem.secret
                      database=$TEST_NGINX_MYSQL_DB;
    upstream backend { server 127.0.0.1:$TEST_NGINX_BACKEND_PORT; }
--- user_files eval
">>> idem.secret\n$ENV{TEST_NGINX_MYSQL_PASSWORD}\n"
--- config eval
IdemTest::orders_location()
--- more_headers
Idempotency-Key: t001-11b
--- request eval
["POST /orders\nx", "POST /orders\nx"]
--- error_code eval
[201, 201]
--- response_headers eval
["!Idempotent-Replayed", "Idempotent-Replayed: true"]
--- no_error_log
[error]



=== TEST 11c: nginx -T shows the files' names, never the secrets in them
--- init
my $dir = "$ENV{TEST_NGINX_SERVROOT}-secret";
mkdir $dir;
my %secret = ('idem.secret' => 's3cr3t-in-a-file',
              'redis.secret' => 'redis-s3cr3t-in-a-file',
              'hmac.secret' => 'hmac-s3cr3t-in-a-file-0123456789');
for my $name (keys %secret) {
    open my $f, '>', "$dir/$name" or die $!;
    print $f "$secret{$name}\n";
    close $f;
}
open my $f, '>', "$dir/nginx.conf" or die $!;
print $f "load_module $ENV{TEST_NGINX_LOAD_MODULES};\n"
       . "error_log $dir/error.log;\npid $dir/nginx.pid;\nevents {}\n"
       . "http { idempotency_store main mysql=127.0.0.1:1 user=u"
       . " database=d password_file=$dir/idem.secret redis=127.0.0.1:1"
       . " redis_password_file=$dir/redis.secret"
       . " secret_file=$dir/hmac.secret; }\n";
close $f;
my $out = `$ENV{TEST_NGINX_BINARY} -p $dir/ -c $dir/nginx.conf -T 2>&1`;
$out =~ /syntax is ok/ or die "nginx -T:\n$out";
for my $name (keys %secret) {
    $out =~ /_file=\Q$dir\E\/\Q$name\E/ or die "nginx -T:\n$out";
    $out !~ /\Q$secret{$name}\E/ or die "nginx -T printed a secret:\n$out";
}
--- config
    location = /t { return 200 ok; }
--- request
GET /t
--- error_code: 200



=== TEST 11d: an unreadable password_file
--- http_config
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d
                      password_file=../html/no-such-file;
--- config
--- must_die
--- error_log
cannot read a secret from "../html/no-such-file"



=== TEST 12: a bad password parameter is not echoed
--- http_config
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d password;
--- config
--- must_die
--- error_log
invalid parameter "password" in "idempotency_store"



=== TEST 13: bad server address
--- http_config
    idempotency_store main mysql=127.0.0.1:notaport user=u database=d;
--- config
--- must_die
--- error_log
in "mysql=127.0.0.1:notaport" of "idempotency_store"



=== TEST 14: bad table name
--- http_config
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d table=a-b;
--- config
--- must_die
--- error_log
invalid parameter "table=a-b"



=== TEST 15: store defined twice
--- http_config
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d;
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d;
--- config
--- must_die
--- error_log
idempotency store "main" is already defined



=== TEST 16: bad pool size
--- http_config
    idempotency_store main mysql=127.0.0.1:3306 user=u database=d pool=0;
--- config
--- must_die
--- error_log
invalid parameter "pool=0" in "idempotency_store"
