// Partial loads in tensorizer._C: the partition and slice planners and Reader-level extent loads
// (engine/include/tz/engine/partial_load.hpp), for the Python package's distributed loads.
#pragma once

#include "common.hpp"

#include "tz/engine/loader.hpp"

#include <memory>
#include <utility>

namespace tz::py {

// The scheduler and loader of an open _C.Reader (reader.cpp); raises invalid_argument when closed.
std::pair<std::shared_ptr<scheduler>, const loader*> reader_loader(pyb::handle reader);

void register_partial(pyb::module_& m);

}  // namespace tz::py
