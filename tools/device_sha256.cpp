// load --device --device-sha256: every tensor of a device load copied back from the device and hashed,
// so that the bytes that landed in device memory (not the plan's counts) can be compared with
// `tensorizer hash` of the same model: tests/cli_device_emulated.sh does on the CUDA emulation.
#include "device_sha256.hpp"

#include "tz/crypto/hash.hpp"
#include "tz/format/tensor_path.hpp"

#include <vector>

namespace tz::cli {

result<std::vector<tensor_sha256>> device_sha256(const device_tensors& t) {
  std::vector<tensor_sha256> out;
  std::vector<std::byte> host;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const auto& e = t.entry(i);
    host.resize(t.size_bytes(i));
    if (auto r = cuda::download(t.buffer(), t.device_offset(i), host); !r) {
      return make_error(r.error().code, "reading tensor '" + format::display_name(e.path) + "' back from cuda:" +
                                            std::to_string(t.device()) + ": " + r.error().message);
    }
    out.push_back({format::json_name(e.path), format::display_name(e.path), to_hex(sha256(host))});
  }
  return out;
}

}  // namespace tz::cli
