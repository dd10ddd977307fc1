// Tests of the network byte sources: URI parsing, SigV4 against AWS's published examples, and
// HTTP/HTTPS, Redis and S3 sources against real servers on loopback (suites http, redis, s3).
#include <doctest/doctest.h>

#include "tz/crypto/hash.hpp"
#include "tz/backends/sigv4.hpp"
#include "tz/backends/uri.hpp"

#include <string>

TEST_SUITE("offline") {

TEST_CASE("http, https, s3 and redis URIs split into host, port and target") {
  auto http = tz::parse_uri("HTTP://example.com/a/b.tensors?x=1");
  REQUIRE(http.has_value());
  CHECK(http->scheme == "http");
  CHECK(http->host == "example.com");
  CHECK(http->port == 80);
  CHECK(http->target == "/a/b.tensors?x=1");
  auto https = tz::parse_uri("https://[::1]:8443");
  REQUIRE(https.has_value());
  CHECK(https->host == "::1");
  CHECK(https->port == 8443);
  CHECK(https->target == "/");
  auto s3 = tz::parse_uri("s3://bucket/dir/model file.tensors");
  REQUIRE(s3.has_value());
  CHECK(s3->host == "bucket");
  CHECK(s3->target == "dir/model file.tensors");
  auto redis = tz::parse_uri("redis://127.0.0.1:16379/my:prefix");
  REQUIRE(redis.has_value());
  CHECK(redis->port == 16379);
  CHECK(redis->target == "my:prefix");
  CHECK(tz::parse_uri("redis://localhost")->port == 6379);
}

TEST_CASE("malformed URIs are rejected with a message naming the URI") {
  for (const char* bad : {"ftp://x/y", "http://:80/", "http://h:0/", "http://h:99999/", "http://h:8a/",
                          "s3://bucket", "s3://bucket/", "s3:///key", "no-scheme"}) {
    auto r = tz::parse_uri(bad);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::invalid_argument);
    CHECK(r.error().message.find(bad) != std::string::npos);
  }
  CHECK(tz::is_remote_uri("S3://b/k"));
  CHECK_FALSE(tz::is_remote_uri("/models/x.tensors"));
}

TEST_CASE("SigV4 signing keys match the AWS documentation examples") {
  auto hex = [](const std::string& raw) {
    return tz::to_hex({reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()});
  };
  const std::string secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  CHECK(hex(tz::sigv4_signing_key(secret, "20120215", "us-east-1", "iam")) ==
        "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
  CHECK(hex(tz::sigv4_signing_key(secret, "20150830", "us-east-1", "iam")) ==
        "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
}

TEST_CASE("SigV4 reproduces the AWS IAM ListUsers example request signature") {
  tz::sigv4_request request{"GET", "/", {{"Version", "2010-05-08"}, {"Action", "ListUsers"}},
                            {{"Host", "iam.amazonaws.com"},
                             {"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                             {"X-Amz-Date", "20150830T123600Z"}},
                            tz::sha256_hex(std::string_view())};
  tz::sigv4_scope scope{"us-east-1", "iam", "20150830T123600Z"};
  auto canonical = tz::sigv4_canonical_request(request);
  CHECK(canonical ==
        "GET\n/\nAction=ListUsers&Version=2010-05-08\n"
        "content-type:application/x-www-form-urlencoded; charset=utf-8\nhost:iam.amazonaws.com\n"
        "x-amz-date:20150830T123600Z\n\ncontent-type;host;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(tz::sha256_hex(canonical) == "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59");
  auto signature = tz::sigv4_sign(request, {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""}, scope);
  CHECK(signature.signature_hex == "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
  CHECK(signature.authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-date, "
        "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
}

TEST_CASE("SigV4 reproduces the get-vanilla test-suite vector") {
  tz::sigv4_request request{"GET", "/", {}, {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                            tz::sha256_hex(std::string_view())};
  auto signature = tz::sigv4_sign(request, {"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""},
                                  {"us-east-1", "service", "20150830T123600Z"});
  CHECK(signature.signature_hex == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST_CASE("SigV4 reproduces the S3 GetObject-with-Range example of the S3 API reference") {
  // The S3 reference pages use a different example secret ('/' where the IAM pages have '+').
  const std::string empty_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  tz::sigv4_request request{"GET", "/test.txt", {},
                            {{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"},
                             {"x-amz-content-sha256", empty_hash}, {"x-amz-date", "20130524T000000Z"}},
                            empty_hash};
  tz::sigv4_scope scope{"us-east-1", "s3", "20130524T000000Z"};
  CHECK(tz::sha256_hex(tz::sigv4_canonical_request(request)) ==
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  auto signature = tz::sigv4_sign(request, {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""}, scope);
  CHECK(signature.signature_hex == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST_CASE("uri_encode keeps unreserved characters and optionally '/'") {
  CHECK(tz::uri_encode("dir/a b+c~(1).txt", true) == "dir/a%20b%2Bc~%281%29.txt");
  CHECK(tz::uri_encode("a/b", false) == "a%2Fb");
  CHECK(tz::sigv4_amz_date(0) == "19700101T000000Z");
}

}  // TEST_SUITE("offline")
