// What a doctest suite needs from the machine (a CUDA device, the reference vectors, a server,
// python packages), declared next to its cases and checked by the shared main (doctest_main.cpp)
// before any case runs. A run whose selected cases all need something absent exits 77 (CTest:
// skipped) without running one; a run mixing them runs the others, so that their failures count,
// and exits 77 only if those all passed. No case ever ends the process itself.
#pragma once

#include <functional>
#include <string>

namespace tz_test {

// Returns "" when the requirement is met here, or why it is not (printed with the skip). Called at
// most once per run for each distinct `what`, before the first case.
using requirement_check = std::function<std::string()>;

// Registers, at static initialisation, that every case of doctest suite `suite` needs `what`.
// A suite may need several things (one object each); the first unmet one is reported.
struct suite_needs {
  suite_needs(std::string suite, std::string what, requirement_check check);
};

}  // namespace tz_test
