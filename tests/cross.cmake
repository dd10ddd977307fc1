# tests/cross.cmake: cross tests of the `tensorizer` CLI against the real Python tensorizer and safetensors.
# The Python peers are test-only (scripts/setup.sh installs them); without them the tests exit 77 (skipped).
# Pick another interpreter with -DPython3_EXECUTABLE=/path/to/python.
set(Python3_FIND_UNVERSIONED_NAMES FIRST)  # the `python3` on PATH (pyenv, venv) is where setup.sh installed
find_package(Python3 COMPONENTS Interpreter)

if(TARGET tensorizer)
  # Needs no Python: synth, inspect, verify, hash, copy and load on a file of our own.
  add_test(NAME cross_cli_smoke
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cross_cli_smoke.sh $<TARGET_FILE:tensorizer>)
  set_tests_properties(cross_cli_smoke PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 LABELS cross)

  if(Python3_Interpreter_FOUND)
    foreach(check IN ITEMS check_ours_read check_theirs_read check_safetensors)
      add_test(NAME cross_${check}
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/${check}.py
                       $<TARGET_FILE:tensorizer>)
      set_tests_properties(cross_${check} PROPERTIES
        SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS cross
        ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
    endforeach()
    # The same checks against tensorizer 2.12.1, run under its venv (TZ_TENSORIZER_2121_PYTHON; absent:
    # skipped), plus its data version 5 files both ways (check_2121_cross.py).
    foreach(check IN ITEMS check_ours_read check_theirs_read check_encryption_cross check_2121_cross)
      add_test(NAME cross_${check}_2121
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/with_peer.py ${TZ_TENSORIZER_2121_PYTHON}
                       ${CMAKE_CURRENT_SOURCE_DIR}/python/${check}.py $<TARGET_FILE:tensorizer>)
      set_tests_properties(cross_${check}_2121 PROPERTIES
        SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS cross
        ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1;TZ_PEER_TENSORIZER=2.12.1")
    endforeach()
  else()
    message(STATUS "tensorizer: no Python 3 interpreter; the cross tests against the real tensorizer are off")
  endif()
endif()
