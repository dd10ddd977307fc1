// Shared doctest main: runs the cases; a test calls tz_test::skip() to exit 77 (CTest "skipped").
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
