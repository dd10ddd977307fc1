// load --device --device-sha256: the SHA-256 of every tensor of a device load, read back from the device.
#pragma once

#include "load_report.hpp"

#include "tz/engine/device_load.hpp"

#include <vector>

namespace tz::cli {

// Copies every tensor of `t` back to the host (synchronously, one at a time, through one host buffer
// the size of the largest) and hashes it, in load order. Fails naming the tensor when a copy fails.
result<std::vector<tensor_sha256>> device_sha256(const device_tensors& t);

}  // namespace tz::cli
