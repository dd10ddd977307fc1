// Private to engine/: what loader.cpp hands to the pipeline (selection, plan, destinations).
#pragma once

#include "tz/loader.hpp"

#include <cstddef>
#include <span>
#include <vector>

namespace tz {

struct loader::pipeline_request {
  std::vector<const format::tensor_entry*> selected;  // file order
  load_options options;
  load_plan plan;
  bool with_headers = true;   // .tensors: read and check each tensor's header
  // Mirror layout (loader-owned memory): ranges land at mirror_base + range.mirror_offset.
  std::byte* mirror_base = nullptr;
  // Scatter layout (caller memory): headers and gaps go to `side`, data to data_dst.
  std::vector<std::byte> side;
  // Per selected tensor: where its data ends up (deserialized_bytes long).
  std::vector<std::span<std::byte>> data_dst;
};

}  // namespace tz
