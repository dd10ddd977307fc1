# shards_test: sharded safetensors checkpoints (index format, opening, loads across shards, mismatches).
tz_add_doctest(shards_test SOURCES shards_test.cpp LIBS tz::sources)
add_test(NAME cli_shards COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli_shards.sh $<TARGET_FILE:tensorizer>)
set_tests_properties(cli_shards PROPERTIES TIMEOUT 300)
