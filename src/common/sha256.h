#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace brisk {

// SHA-256 as specified in FIPS 180-4, streaming. Written here rather than linking OpenSSL for
// one function; checked against sha256sum in tests/unit/model_store_test.cpp.
class Sha256 {
 public:
  void update(const unsigned char* data, size_t size);
  // Finishes the hash; call once.
  std::string hex_digest();

 private:
  void compress(const unsigned char* block);

  std::array<uint32_t, 8> state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace brisk
