// Shared doctest main. A test that cannot run here (no GPU, no server, no reference vectors)
// calls std::exit(77), which CTest reports as skipped (SKIP_RETURN_CODE 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
