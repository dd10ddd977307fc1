// Writes the seed corpora of the fuzz harnesses from the project's own writers: small .tensors files
// (plain, opaque dtype, meta tensor, dimensions >= 2^32 (data version 5), encrypted with a key and
// with KDF parameters) with their
// metadata block cut to its entries (the python writer pads it to 256 KiB), their prefixes and
// crypt-info blocks, safetensors files, and hand-written S3, Redis and HTTP server answers.
// Usage: make_seeds OUT_DIR (creates OUT_DIR/<harness>/seed-*).
#include "tz/format/encryption.hpp"
#include "tz/format/safetensors.hpp"
#include "tz/format/shard_index.hpp"
#include "tz/format/writer.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace tz;
using namespace tz::format;

namespace {

fs::path out_dir;

void emit(const std::string& harness, const std::string& name, const void* data, std::size_t size) {
  fs::create_directories(out_dir / harness);
  std::ofstream(out_dir / harness / ("seed-" + name), std::ios::binary).write(static_cast<const char*>(data),
                                                                             static_cast<std::streamsize>(size));
}
void emit(const std::string& harness, const std::string& name, const std::string& text) {
  emit(harness, name, text.data(), text.size());
}
void emit(const std::string& harness, const std::string& name, std::span<const std::byte> bytes) {
  emit(harness, name, bytes.data(), bytes.size());
}

std::vector<std::byte> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {reinterpret_cast<const std::byte*>(c.data()), reinterpret_cast<const std::byte*>(c.data()) + c.size()};
}

// The file with its metadata block cut to the entries: every offset moves down by the cut.
std::vector<std::byte> compact(const std::vector<std::byte>& file) {
  auto fh = unwrap(parse_file_header(std::span(file).first(file_prefix_bytes), file.size(), "seed"));
  auto index = unwrap(parse_index(fh, std::span(file).subspan(file_prefix_bytes, fh.metadata_bytes), file.size(), "seed"));
  std::vector<std::byte> entries;
  for (const auto& e : index.tensors) append_index_entry(entries, e, fh.has_tagged_metadata());
  const std::uint64_t cut = fh.metadata_bytes - entries.size();
  entries.clear();
  for (auto e : index.tensors) {
    e.header_offset -= cut, e.data_offset -= cut;
    append_index_entry(entries, e, fh.has_tagged_metadata());
  }
  fh.metadata_bytes = entries.size();
  auto out = encode_file_header(fh);
  out.insert(out.end(), entries.begin(), entries.end());
  out.insert(out.end(), file.begin() + static_cast<std::ptrdiff_t>(file_prefix_bytes + cut + entries.size()), file.end());
  return out;
}

std::vector<std::byte> write_tensors(const std::string& name, tensor_encryptor* encryptor, bool opaque, bool meta,
                                     bool long_dims = false) {
  const auto path = out_dir / ("tmp-" + name + ".tensors");
  auto w = unwrap(tensor_writer::create(path.string(), {encryptor}));
  std::vector<float> values{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  tensor_write t;
  t.path = plain_path("layer.weight");
  t.dtype = unwrap(parse_dtype("<f4"));
  t.shape = {2, 3};
  t.data = std::as_bytes(std::span(values));
  unwrap(w.write(t));
  tensor_write b = t;
  b.path = plain_path("block.bias");
  b.shape = {3};
  b.data = b.data.first(12);
  unwrap(w.write(b));
  std::vector<float> wide(24, 0.25f);  // 96 bytes: over 64, as a chunk-count overflow needs
  tensor_write v = t;
  v.path = plain_path("wide");
  v.shape = {24};
  v.data = std::as_bytes(std::span(wide));
  unwrap(w.write(v));
  if (opaque) {
    std::vector<std::uint16_t> bf{0x3f80, 0x4000};
    tensor_write o;
    o.path = plain_path("bf16");
    o.dtype = unwrap(parse_dtype(std::string("<V2\0torch.bfloat16", 18)));
    o.shape = {2};
    o.data = std::as_bytes(std::span(bf));
    unwrap(w.write(o));
  }
  if (meta) {
    tensor_write m;
    m.path = plain_path("zeros");
    m.dtype = unwrap(parse_dtype("<i8"));
    m.shape = {4};
    m.meta = true;
    unwrap(w.write(m));
  }
  if (long_dims) {  // data-less, so cheap: a zero-size tensor and a meta tensor of 2^32 elements
    tensor_write z;
    z.path = plain_path("long.empty");
    z.dtype = unwrap(parse_dtype("<f4"));
    z.shape = {0, 1ull << 32};
    unwrap(w.write(z));
    tensor_write m = z;
    m.path = plain_path("long.meta");
    m.dtype = unwrap(parse_dtype("|u1"));
    m.shape = {1ull << 32};
    m.meta = true;
    unwrap(w.write(m));
    b.path = plain_path("after.long");
    unwrap(w.write(b));
  }
  unwrap(w.close());
  auto file = compact(read_all(path));
  fs::remove(path);
  return file;
}

void tensors_seeds() {
  auto key = [] { return unwrap(crypto::secret_key::from_bytes(std::vector<std::uint8_t>(32, 7))); };
  auto by_key = tensorizer_encryptor::from_key(key());
  crypto::kdf_params params{crypto::kdf_min.opslimit, crypto::kdf_min.memlimit_bytes, crypto::alg_argon2id13, {}};
  params.salt.fill(3);
  auto by_kdf = tensorizer_encryptor::from_derived_key(key(), params);
  const std::vector<std::pair<std::string, std::vector<std::byte>>> files{
      {"plain", write_tensors("plain", nullptr, false, false)},
      {"opaque", write_tensors("opaque", nullptr, true, false)},
      {"meta", write_tensors("meta", nullptr, false, true)},
      {"key", write_tensors("key", &by_key, false, false)},
      {"kdf-meta", write_tensors("kdf", &by_kdf, true, true)},
      {"long", write_tensors("long", nullptr, true, false, true)},
      {"key-long", write_tensors("key-long", &by_key, false, false, true)},
  };
  for (const auto& [name, file] : files) {
    emit("tensors_file", name, file);
    std::vector<std::byte> prefix(8);
    for (std::size_t i = 0; i < 8; ++i) prefix[i] = static_cast<std::byte>((file.size() >> (8 * i)) & 0xff);
    prefix.insert(prefix.end(), file.begin(), file.begin() + file_prefix_bytes);
    emit("tensors_prefix", name, prefix);
    auto fh = unwrap(parse_file_header(std::span(file).first(file_prefix_bytes), file.size(), "seed"));
    auto index = unwrap(parse_index(fh, std::span(file).subspan(file_prefix_bytes, fh.metadata_bytes), file.size(), "seed"));
    int n = 0;
    for (const auto& e : index.tensors) {
      auto h = unwrap(parse_tensor_header(std::span(file).subspan(e.header_offset, e.header_bytes()), fh, e, "seed"));
      if (h.crypt_end <= h.crypt_begin) continue;
      std::vector<std::byte> block{static_cast<std::byte>(e.data_length / 64)};
      block.insert(block.end(), file.begin() + static_cast<std::ptrdiff_t>(e.header_offset + h.crypt_begin + 8),
                   file.begin() + static_cast<std::ptrdiff_t>(e.header_offset + h.crypt_end));
      emit("crypt_info", name + "-" + std::to_string(n++), block);
    }
  }
}

void safetensors_seeds() {
  std::vector<float> f{1, 2, 3, 4};
  std::vector<std::uint8_t> u{1, 0, 1};
  std::vector<st_write_tensor> tensors{{"a.weight", "F32", {2, 2}, std::as_bytes(std::span(f))},
                                       {"mask", "BOOL", {3}, std::as_bytes(std::span(u))},
                                       {"empty", "F16", {0, 4}, {}},
                                       {"scalar", "U8", {}, std::as_bytes(std::span(u)).first(1)}};
  for (int variant = 0; variant < 3; ++variant) {
    const st_metadata metadata = variant == 1 ? st_metadata{{"format", "pt"}} : st_metadata{};
    auto layout = unwrap(plan_safetensors(std::span(tensors).first(variant == 2 ? 1 : tensors.size()), metadata));
    std::string file = layout.header;
    for (auto i : layout.order) file.append(reinterpret_cast<const char*>(tensors[i].data.data()), tensors[i].data.size());
    emit("safetensors", std::to_string(variant), file);
  }
}

void shard_index_seeds() {
  shard_index index;
  index.shards = {shard_file_name(0, 2), shard_file_name(1, 2)};
  index.weight_map = {{"model.embed_tokens.weight", 0}, {"lm_head.weight", 1}, {"layers.0.norm.w\xc3\xa9ight", 0}};
  index.total_size = 123456;
  emit("shard_index", "0", unwrap(write_shard_index_json(index)));
  emit("shard_index", "1", std::string(R"({"metadata":{"total_size":1.0e3},"weight_map":{"a":"x.safetensors","a":"y.safetensors"}})"));
}

void network_seeds() {
  emit("s3_xml", "error", "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code><Message>The "
                          "specified key does not exist.</Message><Key>a/b</Key><RequestId>tx1</RequestId></Error>");
  emit("s3_xml", "upload", "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>2~abc</UploadId>"
                           "</InitiateMultipartUploadResult>");
  emit("redis_reply", "scan", std::string("\x10") + "*2\r\n$1\r\n0\r\n*2\r\n$5\r\nm:0:0\r\n$7\r\nm:0:100\r\n");
  emit("redis_reply", "strlen", std::string("\x03") + ":100\r\n:0\r\n-ERR wrong type\r\n");
  emit("redis_reply", "getrange", std::string("\xff") + "$4\r\nabcd\r\n$-1\r\n+OK\r\n*-1\r\n");
  emit("redis_reply", "nested", std::string("\x01") + "*3\r\n*1\r\n:1\r\n$0\r\n\r\n*0\r\n");
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"x\"\r\n\r\nhello";
  emit("http_response", "get", std::string("\x00\x03", 2) + ok);
  emit("http_response", "head", std::string("\x01\x00", 2) + "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
  emit("http_response", "chunked", std::string("\x00\x01", 2) +
                                       "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab\r\n\r\n0\r\n\r\n");
  emit("http_response", "close", std::string("\x00\x10", 2) + "HTTP/1.0 206 Partial Content\r\nContent-Range: "
                                                               "bytes 0-3/10\r\nConnection: close\r\n\r\nabcd");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  out_dir = argv[1];
  fs::create_directories(out_dir);
  tensors_seeds();
  safetensors_seeds();
  shard_index_seeds();
  network_seeds();
  std::printf("make_seeds: seeds written under %s\n", out_dir.c_str());
  return 0;
}
