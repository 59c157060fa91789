# Keys from what the request already carries (idempotency_key): a JSON
# member by path, a form field, a complex value, several composed; the
# 400 of each body that does not hold the key, naming its source; a body
# that passes unprotected with idempotency_required off; bodies in temp
# files; HTTP/2.  The backend counts executions per the key the module
# composed ($idempotency_key, sent as its Idempotency-Key).

use lib 't';
use Test::Nginx::Socket 'no_plan';
use IdemTest;

no_shuffle();

# a location /NAME with the key from @src (and more directives)
sub loc {
    my ($name, $src, @more) = @_;
    return "    location /$name {\n"
         . "        idempotency main;\n"
         . "        idempotency_key $src;\n"
         . join('', map { "        $_;\n" } @more)
         . ((grep { /^proxy_set_header Idempotency-Key/ } @more) ? ''
            : "        proxy_set_header Idempotency-Key \$idempotency_key;\n")
         . "        proxy_pass http://backend;\n"
         . "        add_header X-Idem \$idempotency_status always;\n"
         . "        add_header X-Key \$idempotency_key always;\n"
         . "    }\n";
}

our $Map = "map \$http_x_tenant \$tenant { default ''; acme acme; }\n";

our $Config = join '',
    loc('json', 'json=id', 'idempotency_required on'),
    loc('nested', 'json=data.object.id', 'idempotency_required on'),
    loc('items', 'json=items[1].sku', 'idempotency_required on'),
    loc('adyen', 'json=notificationItems[0].NotificationRequestItem.eventCode '
                 . 'json=notificationItems[0].NotificationRequestItem.pspReference',
        'idempotency_required on'),
    loc('composed', '$arg_user json=order.number', 'idempotency_required on'),
    loc('mapped', '$tenant $arg_order', 'idempotency_required on'),
    loc('form', 'form=notify_id', 'idempotency_required on'),
    loc('optional', 'json=id',
        'proxy_set_header Idempotency-Key "$idempotency_key$arg_count_as"'),
    loc('small', 'json=id max_body=64', 'idempotency_required on'),
    loc('hvar', '$http_idempotency_key', 'idempotency_fingerprint off'),
    loc('big', 'json=id max_body=4m', 'idempotency_required on',
        'client_body_buffer_size 1k', 'client_max_body_size 8m'),
    "    location /header {\n"
    . "        idempotency main;\n"
    . "        idempotency_fingerprint off;\n"
    . "        proxy_pass http://backend;\n"
    . "        add_header X-Idem \$idempotency_status always;\n"
    . "    }\n",
    "    location = /count { proxy_pass http://backend/__count; }\n";

block_defaults(
    http_config => store_config() . $Map,
    config => $Config);

# the key of parts as the module composes it, for /count?key=
sub k { join '', map { length($_) . ":$_," } @_ }
sub ck { my $k = k(@_); $k =~ s/([^A-Za-z0-9_.~-])/sprintf '%%%02X', ord $1/ge; "GET /count?key=$k" }

# a JSON body of about $n bytes whose "id" comes last
sub big_json {
    my ($id, $n) = @_;
    my $pad = 'p' x ($n - 18 - length $id);
    return qq({"pad":"$pad","id":"$id"});
}

run_tests();

__DATA__

=== TEST 1: json=id: the first delivery runs, the resend is replayed, the key is the member's value
--- request eval
["POST /json\n{\"id\":\"evt_t500_1\",\"type\":\"charge.succeeded\"}",
 "POST /json\n{\"id\":\"evt_t500_1\",\"type\":\"charge.succeeded\"}",
 main::ck("evt_t500_1")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 10:evt_t500_1,", "X-Idem: replay\nIdempotent-Replayed: true", ""]
--- response_body_like eval
['"key":"10:evt_t500_1,","execution":1,', '"execution":1,', '^1$']
--- no_error_log
[error]



=== TEST 2: a nested member, decoded from its JSON escapes
--- request eval
["POST /nested\n{\"type\":\"x\",\"data\":{\"id\":\"no\",\"object\":{\"amount\":5,\"id\":\"ch_t500\\u005f2\"}}}",
 "POST /nested\n{\"type\":\"x\",\"data\":{\"id\":\"no\",\"object\":{\"amount\":5,\"id\":\"ch_t500\\u005f2\"}}}",
 main::ck("ch_t500_2")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 9:ch_t500_2,", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1,', '"execution":1,', '^1$']



=== TEST 3: an array index; a member of the same name elsewhere is not it
--- request eval
["POST /items\n{\"sku\":\"top\",\"items\":[{\"sku\":\"a\"},{\"sku\":\"t500-3\"},{\"sku\":\"c\"}]}",
 main::ck("t500-3")]
--- error_code eval
[201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 6:t500-3,", ""]
--- response_body_like eval
['"execution":1,', '^1$']



=== TEST 4: two members composed (Adyen's eventCode + pspReference), a number as written
--- request eval
my $b = '{"live":"false","notificationItems":[{"NotificationRequestItem":{"eventCode":"AUTHORISATION","pspReference":8835511210681762,"success":"true"}}]}';
["POST /adyen\n$b", "POST /adyen\n$b", main::ck("AUTHORISATION", "8835511210681762")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 13:AUTHORISATION,16:8835511210681762,", "X-Idem: replay", ""]
--- response_body_like eval
['"execution":1,', '"execution":1,', '^1$']



=== TEST 5: a business key: an argument and a body field; another user's same order number is another key
--- request eval
["POST /composed?user=alice\n{\"order\":{\"number\":1042}}",
 "POST /composed?user=alice\n{\"order\":{\"number\":1042}}",
 "POST /composed?user=bob\n{\"order\":{\"number\":1042}}",
 main::ck("alice", "1042"), main::ck("bob", "1042")]
--- error_code eval
[201, 201, 201, 200, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 5:alice,4:1042,", "X-Idem: replay", "X-Idem: new\nX-Key: 3:bob,4:1042,", "", ""]
--- response_body_like eval
['"execution":1,', '"execution":1,', '"execution":1,', '^1$', '^1$']



=== TEST 6: two complex values, from map and an argument
--- more_headers
X-Tenant: acme
--- request eval
["POST /mapped?order=t500-6\nx", "POST /mapped?order=t500-6\nx", main::ck("acme", "t500-6")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 4:acme,6:t500-6,", "X-Idem: replay", ""]



=== TEST 7: a complex value that is empty: 400 naming it
--- request
POST /mapped?order=t500-7
x
--- error_code: 400
--- response_headers
X-Idem: missing
Content-Type: application/problem+json
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-missing".*"detail":"\$tenant: is empty\."
--- error_log
idempotency: key source $tenant: is empty



=== TEST 8: a form field, percent-decoded, "+" a space (Alipay's notify_id)
--- more_headers
Content-Type: application/x-www-form-urlencoded; charset=utf-8
--- request eval
["POST /form\nnotify_time=2026-12-03+10%3A00%3A00&notify_id=ac05%2Bt500+8&sign=xyz",
 "POST /form\nnotify_time=2026-12-03+10%3A00%3A00&notify_id=ac05%2Bt500+8&sign=xyz",
 main::ck("ac05+t500 8")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new\nX-Key: 11:ac05+t500 8,", "X-Idem: replay", ""]



=== TEST 9: not JSON: 400 key-body-invalid, naming the field and what the parser found
--- more_headers
Content-Type: text/plain
--- request
POST /json
id=evt_t500_9
--- error_code: 400
--- response_headers
X-Idem: invalid
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-body-invalid".*"status":400,"detail":"json=id: the request body is not JSON: lexical error: invalid char in json text\."



=== TEST 10: the member missing: 400 key-missing naming it
--- request
POST /nested
{"data":{"object":{"amount":5}}}
--- error_code: 400
--- response_headers
X-Idem: missing
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-missing".*"detail":"json=data\.object\.id: not in the request body\."



=== TEST 11: a member that is an object, an array, null, a boolean: 400 key-invalid
--- request eval
["POST /json\n{\"id\":{\"x\":1}}", "POST /json\n{\"id\":[1]}", "POST /json\n{\"id\":null}", "POST /json\n{\"id\":true}"]
--- error_code eval
[400, 400, 400, 400]
--- response_body_like eval
['"detail":"json=id: is an object, not a string or a number\."',
 '"detail":"json=id: is an array, not a string or a number\."',
 '"detail":"json=id: is null, not a string or a number\."',
 '"detail":"json=id: is a boolean, not a string or a number\."']



=== TEST 12: a member twice (JSON parsers disagree on which one counts): 400
--- request
POST /json
{"id":"evt_t500_12a","x":1,"id":"evt_t500_12b"}
--- error_code: 400
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-invalid".*"detail":"json=id: more than once in the request body\."



=== TEST 13: longer than 255 bytes, empty, a control character: 400
--- request eval
["POST /json\n{\"id\":\"" . ("k" x 256) . "\"}", "POST /json\n{\"id\":\"\"}", "POST /json\n{\"id\":\"a\\u0001b\"}"]
--- error_code eval
[400, 400, 400]
--- response_body_like eval
['"type":"urn:ngx-idempotency:problem:key-invalid".*"detail":"json=id: is longer than 255 bytes\."',
 '"type":"urn:ngx-idempotency:problem:key-missing".*"detail":"json=id: is empty\."',
 '"type":"urn:ngx-idempotency:problem:key-invalid".*"detail":"json=id: has a control character\."']



=== TEST 14: a body over max_body: 400 naming the limit, by Content-Length before it is read
--- request eval
"POST /small\n{\"id\":\"evt_t500_14\",\"pad\":\"" . ("p" x 80) . "\"}"
--- error_code: 400
--- response_body_like: "type":"urn:ngx-idempotency:problem:key-body-invalid".*"detail":"json=id: the request body is larger than max_body=64\."



=== TEST 15: a chunked body over max_body: the same 400, counted as it is read
--- more_headers
Transfer-Encoding: chunked
--- request eval
my $b = "{\"id\":\"evt_t500_15\",\"pad\":\"" . ("p" x 80) . "\"}";
"POST /small\n" . sprintf("%x", length $b) . "\r\n$b\r\n0\r\n\r\n"
--- error_code: 400
--- response_body_like: "detail":"json=id: the request body is larger than max_body=64\."



=== TEST 15b: a chunked body in memory, in 31 chunks: the key all the same
--- more_headers
Transfer-Encoding: chunked
--- request eval
my $b = '{"id":"evt_t500_15b","pad":"' . ('p' x 3000) . '"}';
"POST /json\n" . CORE::join('', map { sprintf("%x\r\n%s\r\n", length $_, $_) } ($b =~ /(.{1,100})/gs)) . "0\r\n\r\n"
--- error_code: 201
--- response_headers
X-Idem: new
X-Key: 12:evt_t500_15b,



=== TEST 16: no body at all: 400 key-missing
--- request
POST /json
--- error_code: 400
--- response_body_like: "detail":"json=id: the request has no body\."



=== TEST 17: idempotency_required off: a body without the key passes unprotected, each time
--- request eval
["POST /optional?count_as=t500-17\nnot json", "POST /optional?count_as=t500-17\nnot json",
 "POST /optional?count_as=t500-17\n{\"other\":1}", "GET /count?key=t500-17"]
--- error_code eval
[201, 201, 201, 200]
--- response_headers eval
["X-Idem: bypass", "X-Idem: bypass", "X-Idem: bypass", ""]
--- response_body_like eval
['"key":"t500-17","execution":1,', '"key":"t500-17","execution":2,', '"key":"t500-17","execution":3,', '^3$']



=== TEST 17b: ... and the error log says so
--- request
POST /optional?count_as=t500-17b
not json
--- error_code: 201
--- error_log
key source json=id: the request body is not JSON: lexical error: invalid string in json text, passed unprotected



=== TEST 18: a body in a temp file (client_body_buffer_size 1k), the member at its end
--- request eval
"POST /big\n" . main::big_json("evt_t500_18", 200000)
--- error_code: 201
--- response_headers
X-Idem: new
--- response_body_like: "execution":1,"method":"POST","uri":"/big","body_bytes":200000
--- error_log
a client request body is buffered to a temporary file



=== TEST 18b: ... its resend is replayed; another body with the same id is 422
--- request eval
["POST /big\n" . main::big_json("evt_t500_18", 200000),
 "POST /big\n" . main::big_json("evt_t500_18", 200001),
 main::ck("evt_t500_18")]
--- error_code eval
[201, 422, 200]
--- response_headers eval
["X-Idem: replay", "X-Idem: mismatch", ""]
--- response_body_like eval
['"execution":1,', 'key-reused', '^1$']



=== TEST 19: a 3 MB body in a temp file, read in slices across events: the key at its end
--- request eval
["POST /big\n" . main::big_json("evt_t500_19", 3000000),
 "POST /big\n" . main::big_json("evt_t500_19", 3000000),
 main::ck("evt_t500_19")]
--- error_code eval
[201, 201, 200]
--- response_headers eval
["X-Idem: new", "X-Idem: replay", ""]
--- response_body_like eval
['"body_bytes":3000000', '"execution":1,', '^1$']
--- timeout: 20



=== TEST 20: a key from a source never shares the header's key of the same text
--- more_headers
Idempotency-Key: t500-20
--- request eval
["POST /header\nx", "POST /hvar\nx", "POST /hvar\nx"]
--- error_code eval
[201, 201, 201]
--- response_headers eval
["X-Idem: new", "X-Idem: new\nX-Key: 7:t500-20,", "X-Idem: replay"]



=== TEST 21: HTTP/2: a JSON delivery and its resend, replayed byte for byte
--- http_config eval
IdemTest::store_config() . $main::Map . "server {\n    "
. IdemStress::listen_http2('127.0.0.1:' . (IdemTest::port() + 1), '    ')
. "\n" . $main::Config . "}\n"
--- init
my $port = port() + 1;
my $body = '{"id":"evt_t500_21","data":{"object":{"id":"ch_1"}}}';
my @o = map { scalar `curl -s --http2-prior-knowledge -X POST -H 'Content-Type: application/json' --data-binary '$body' -D - http://127.0.0.1:$port/json` } 1, 2;
$o[0] =~ m{^HTTP/2 201} && $o[0] =~ /x-idem: new/i or die "h2 first: " . join("|", split /\r?\n/, $o[0]);
$o[1] =~ m{^HTTP/2 201} && $o[1] =~ /idempotent-replayed: true/i or die "h2 replay: $o[1]";
my @b = map { (my $x = $_) =~ s/.*?\r\n\r\n//s; $x } @o;
$b[0] eq $b[1] && length $b[0] or die "h2 bodies differ";
--- request eval
main::ck("evt_t500_21")
--- error_code: 200
--- response_body eval
"1"



=== TEST 22: configuration: a bad path, a constant, no source, issued keys with sources
--- config
    location /a { idempotency main; idempotency_key json=a..b; proxy_pass http://backend; }
--- must_die
--- error_log
invalid source "json=a..b" in "idempotency_key" directive: a member's name is empty



=== TEST 23: a constant is not a key
--- config
    location /a { idempotency main; idempotency_key "the-same-key"; proxy_pass http://backend; }
--- must_die
--- error_log
invalid source "the-same-key" in "idempotency_key" directive: it has no variable



=== TEST 24: issued keys are header keys
--- http_config eval
IdemTest::store_config(secret => 'a-secret-of-more-than-16-bytes')
--- config
    location /a { idempotency main; idempotency_keys issued; idempotency_key json=id; proxy_pass http://backend; }
--- must_die
--- error_log
"idempotency_keys issued" checks the key header: it cannot be used with "idempotency_key"'s sources
