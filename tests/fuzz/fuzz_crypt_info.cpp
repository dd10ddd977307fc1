// libFuzzer harness: a crypt-info block body (FORMAT.md §9.4) alone, then a tensor of the first
// input byte's length (x 64) under it decrypted with a fixed key when the MAC count fits, as
// parse_tensor_header demands. Round trip as in tensors_checks.hpp.
#include "tensors_checks.hpp"

using namespace tz;
using namespace tz::format;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto input = fuzz::bytes_of(data, size);
  const std::uint64_t data_length = std::uint64_t{data[0]} * 64;
  const auto body = input.subspan(1);
  auto info = parse_crypt_info(body, 0, "fuzz");
  if (!info) {
    fuzz::require(info.error().code == errc::format, "crypt-info errors are errc::format");
    return 0;
  }
  fuzz::check_crypt_round_trip(*info, body);
  if (!info->cipher) return 0;
  const auto& x = *info->cipher;
  fuzz::require(x.sequential ? x.macs.size() == 1 : x.chunk_bytes >= 1024 && x.chunk_bytes % 64 == 0,
                "cipher chunk fields as checked");
  if (!x.sequential && x.macs.size() != data_length / x.chunk_bytes + (data_length % x.chunk_bytes != 0)) return 0;
  tensor_header h;
  h.name = "fuzz";
  h.data_length = data_length;
  h.crypt = *info;
  std::vector<std::byte> tensor(data_length, std::byte{0x5a});
  fuzz::try_decrypt(h, tensor);
  return 0;
}
