// The one translation unit that compiles Boost.JSON (header-only mode) for the whole project.
#include <boost/json/src.hpp>
