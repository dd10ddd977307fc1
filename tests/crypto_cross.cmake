# Encryption cross test of the CLI against the real tensorizer (test-only Python peers; 77 = skipped).
find_package(Python3 COMPONENTS Interpreter)
if(TARGET tensorizer AND Python3_Interpreter_FOUND)
  add_test(NAME cross_encryption
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_encryption_cross.py
                   $<TARGET_FILE:tensorizer>)
  set_tests_properties(cross_encryption PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS cross
                       ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
endif()
