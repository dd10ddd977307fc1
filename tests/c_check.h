/* The C tests' one check (c_api_test.c, c_api_partial_test.c): CHECK(cond) reports a failed
 * condition with its place and the C ABI's last error message, counts it and goes on, so one run
 * lists every failure; the test's main returns non-zero when `failures` is. One translation unit
 * per test program, so the counter is static here. */
#ifndef TZ_TEST_C_CHECK_H
#define TZ_TEST_C_CHECK_H

#include <tensorizer.h>

#include <stdio.h>

static int failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #cond,   \
              tz_last_error_message());                                                            \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

#endif
