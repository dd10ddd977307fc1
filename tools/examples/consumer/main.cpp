// The README's C++ embedding example, built against the installed package by tests/install_consumer.sh:
// open a file or URI, list it, load every tensor (verified), print each with its first value.
#include <tensorizer/tensorizer.hpp>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: app FILE|URI\n"), 2;
  tensorizer::options options;
  options.verify = true;  // check the stored CRC32 / SHA-256 of every tensor
  auto model = tensorizer::model::open(argv[1], options);
  if (!model) return std::fprintf(stderr, "%s\n", model.error().message.c_str()), 1;

  auto loaded = model->load();  // every tensor, in one allocation owned by `loaded`
  if (!loaded) {
    std::fprintf(stderr, "%s: %s\n", tensorizer::errc_name(loaded.error().code), loaded.error().message.c_str());
    return 1;
  }
  for (std::size_t i = 0; i < loaded->size(); ++i) {
    const auto& t = loaded->info(i);
    float first = 0;
    if (t.dtype == "float32" && t.size_bytes >= 4) std::memcpy(&first, loaded->data(i).data(), 4);
    std::printf("%s %s %llu bytes, first %g\n", t.name.c_str(), t.dtype.c_str(),
                static_cast<unsigned long long>(t.size_bytes), first);
  }
  std::printf("tensorizer %s: %llu bytes in %.6f s\n", tensorizer::version().text,
              static_cast<unsigned long long>(loaded->bytes()), loaded->timings().total_s);
  return 0;
}
