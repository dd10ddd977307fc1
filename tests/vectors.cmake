# tests/vectors.cmake: the tz_vectors and tz_vectors_2121 fixtures. tests/vectors/make_vectors.py writes the reference
# vectors (five .tensors files and their manifests) with the real tensorizer 2.11.1 into
# ${TZ_VECTORS_DIR}, before any *_reference entry runs. Exit 77 (skipped) when torch/tensorizer are
# not importable; scripts/setup.sh installs them.
set(Python3_FIND_UNVERSIONED_NAMES FIRST)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(tz_vectors_python ${Python3_EXECUTABLE})
else()
  set(tz_vectors_python python3)  # fails at test time, with the reason, rather than passing silently
endif()
add_test(NAME tz_vectors_make
         COMMAND ${tz_vectors_python} ${CMAKE_CURRENT_LIST_DIR}/vectors/make_vectors.py ${TZ_VECTORS_DIR})
set_tests_properties(tz_vectors_make PROPERTIES FIXTURES_SETUP tz_vectors SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")

# The tz_vectors_2121 fixture: the same script writes the vectors of tensorizer 2.12.1 (the five
# above plus the data version 5 files of tests/vectors/cases_2121.py) into ${TZ_VECTORS_2121_DIR},
# run under ${TZ_TENSORIZER_2121_PYTHON}, the venv scripts/setup.sh makes; without it, exit 77 (skipped),
# and so are the *_reference_2121 entries and the 2.12.1 cross tests.
add_test(NAME tz_vectors_2121_make
         COMMAND ${tz_vectors_python} ${CMAKE_CURRENT_LIST_DIR}/vectors/make_vectors.py --tensorizer 2.12.1
                 --python ${TZ_TENSORIZER_2121_PYTHON} ${TZ_VECTORS_2121_DIR})
set_tests_properties(tz_vectors_2121_make PROPERTIES FIXTURES_SETUP tz_vectors_2121 SKIP_RETURN_CODE 77 TIMEOUT 300
                     ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
