# tests/crypto.cmake: the crypto module's doctest suite (encryption primitives, reference vectors).
# Two CTest entries from one executable: crypto_test_reference (suite "reference") decrypts the
# reference vectors that the tz_vectors fixture writes; crypto_test runs every other case. libsodium is linked directly only so the test can compare
# increment_nonce with sodium_increment.
add_executable(crypto_test crypto_test.cpp $<TARGET_OBJECTS:tz_doctest_main>)
target_link_libraries(crypto_test PRIVATE doctest::doctest tz::crypto PkgConfig::SODIUM Threads::Threads)
target_compile_definitions(crypto_test PRIVATE TZ_VECTORS_DIR="${TZ_VECTORS_DIR}"
  TZ_VECTORS_2121_DIR="${TZ_VECTORS_2121_DIR}")
tz_target_defaults(crypto_test)
add_test(NAME crypto_test COMMAND crypto_test --test-suite-exclude=reference)
add_test(NAME crypto_test_reference COMMAND crypto_test --test-suite=reference)
set_tests_properties(crypto_test crypto_test_reference PROPERTIES SKIP_RETURN_CODE 77)
set_tests_properties(crypto_test_reference PROPERTIES FIXTURES_REQUIRED tz_vectors)
