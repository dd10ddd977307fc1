// tz::base: the owning descriptor, the full pread/pwrite loops, os_error, mapped_file, TZ_CO_TRY/TZ_CO_CHECK.
#include "result_printer.hpp"
#include "tz/base/error.hpp"
#include "tz/base/posix_io.hpp"
#include "tz/base/task.hpp"
#include "tz/base/unique_fd.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// A fresh temporary file holding `bytes`; removed with the object.
struct temp_path {
  std::string path;
  explicit temp_path(const std::string& bytes) {
    std::string pattern = "/tmp/tz-base-test-XXXXXX";
    const int fd = ::mkstemp(pattern.data());
    REQUIRE(fd >= 0);
    const tz::unique_fd owned(fd);
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    path = pattern;
  }
  ~temp_path() { ::unlink(path.c_str()); }
};

std::string text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

template <class T>
tz::result<T> run(tz::task<tz::result<T>> t) {
  boost::asio::io_context ctx;
  auto f = boost::asio::co_spawn(ctx, std::move(t), boost::asio::use_future);
  ctx.run();
  return f.get();
}

tz::task<tz::result<int>> half_of(int v) {
  if (v % 2 != 0) co_return tz::make_error(tz::errc::invalid_argument, std::to_string(v) + " is odd");
  co_return v / 2;
}

tz::task<tz::result<int>> quarter_of(int v) {
  TZ_CO_TRY(half, co_await half_of(v));
  TZ_CO_TRY(quarter, co_await half_of(half));
  co_return quarter;
}

tz::task<tz::result<void>> check_even(int v) {
  TZ_CO_CHECK(co_await half_of(v));
  co_return tz::result<void>{};
}

}  // namespace

TEST_CASE("unique_fd closes on destruction, not after release, and moves ownership") {
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  { const tz::unique_fd owner(fd); CHECK(is_open(fd)); }
  CHECK_FALSE(is_open(fd));

  tz::unique_fd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  fd = a.get();
  tz::unique_fd b(std::move(a));
  CHECK_FALSE(a);
  CHECK(b.get() == fd);
  const int raw = b.release();
  CHECK_FALSE(b);
  CHECK(is_open(raw));  // release() hands it over without closing
  tz::unique_fd c(raw);
  CHECK(c.close() == 0);
  CHECK_FALSE(is_open(raw));
  CHECK(c.close() == 0);  // closing an empty owner is a no-op
}

TEST_CASE("pread_full reads at an offset and names source and offset at end of file") {
  temp_path f("0123456789");
  auto fd = tz::open_read_only(f.path);
  REQUIRE(fd);
  std::vector<std::byte> buf(4);
  REQUIRE(tz::pread_full(fd->get(), buf, 3, "file x"));
  CHECK(text(buf) == "3456");

  std::vector<std::byte> past(6);
  auto r = tz::pread_full(fd->get(), past, 7, "file x");
  REQUIRE_FALSE(r);
  CHECK(r.error().code == tz::errc::io);
  CHECK(r.error().message == "file x: unexpected end of file at offset 10 (needed 3 more bytes)");
  CHECK(tz::pread_full(fd->get(), past, 7, "file x", tz::errc::format).error().code == tz::errc::format);

  auto bad = tz::pread_full(-1, buf, 5, "file y");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.rfind("file y: read failed at offset 5: ", 0) == 0);
}

TEST_CASE("pwrite_full writes at an offset") {
  temp_path f("..........");
  tz::unique_fd fd(::open(f.path.c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(fd);
  const std::string s = "abc";
  REQUIRE(tz::pwrite_full(fd.get(), std::as_bytes(std::span(s)), 4, "file z"));
  auto m = tz::mapped_file::open(f.path);
  REQUIRE(m);
  CHECK(text(m->bytes()) == "....abc...");
  auto bad = tz::pwrite_full(-1, std::as_bytes(std::span(s)), 2, "file z");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.rfind("file z: write failed at offset 2: ", 0) == 0);
}

TEST_CASE("os_error: ENOENT is not_found, other errors io, with strerror") {
  auto e = tz::os_error(ENOENT, "file /nope: cannot open");
  CHECK(e.code == tz::errc::not_found);
  CHECK(e.message == "file /nope: cannot open: No such file or directory");
  CHECK(tz::os_error(EACCES, "x").code == tz::errc::io);
}

TEST_CASE("mapped_file maps whole files, empty ones as an empty span, and reports a missing one") {
  temp_path f("hello");
  auto m = tz::mapped_file::open(f.path);
  REQUIRE(m);
  CHECK(text(m->bytes()) == "hello");
  auto moved = std::move(*m);
  CHECK(m->bytes().empty());
  CHECK(text(moved.bytes()) == "hello");

  temp_path empty("");
  auto e = tz::mapped_file::open(empty.path);
  REQUIRE(e);
  CHECK(e->bytes().empty());

  auto missing = tz::mapped_file::open("/nonexistent/tz-base-test");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == tz::errc::not_found);
  CHECK(missing.error().message.find("/nonexistent/tz-base-test") != std::string::npos);
}

TEST_CASE("TZ_CO_TRY and TZ_CO_CHECK unwrap values and propagate the first error") {
  CHECK(*run(quarter_of(12)) == 3);
  auto odd = run(quarter_of(6));  // 6 / 2 = 3, odd at the second step
  REQUIRE_FALSE(odd);
  CHECK(odd.error().message == "3 is odd");
  CHECK(run(check_even(4)));
  CHECK(run(check_even(5)).error().code == tz::errc::invalid_argument);
}
