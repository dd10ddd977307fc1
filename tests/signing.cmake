# signing_test: signature bundles, file digests and the engine's observed loads (signing/).
tz_add_doctest(signing_test SOURCES signing_test.cpp LIBS tz::signing tz::engine tz::backends)
# OpenSSF model-signing 1.1.1 signs and we verify, we sign and it verifies, and every tampering
# case fails in both (exit 77 without its venv: scripts/setup.sh).
if(TARGET tensorizer)
  add_test(NAME signing_interop COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/signing_interop.sh $<TARGET_FILE:tensorizer>)
  set_tests_properties(signing_interop PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()
