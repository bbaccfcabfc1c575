#include "core/checksum.h"

#include <gtest/gtest.h>

#include <vector>

namespace dt {
namespace {

TEST(Checksum, Crc32cMatchesTheStandardCheckValueAndContinuesOverPieces) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value (RFC 3720)
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

// The instruction's result is the table's, for every length from 0 to 64 at every alignment
// within a word, and continued over pieces; then over a megabyte of varied bytes.
TEST(Checksum, TheProcessorsInstructionGivesTheTablesChecksum) {
  std::vector<unsigned char> bytes(1 << 20);
  uint32_t state = 12345;
  for (unsigned char& b : bytes) b = static_cast<unsigned char>((state = state * 1103515245u + 12345u) >> 24);
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t length = 0; length <= 64; ++length) {
      const unsigned char* p = bytes.data() + offset;
      ASSERT_EQ(crc32c(p, length), crc32c_portable(p, length)) << offset << " " << length;
      ASSERT_EQ(crc32c(p, length, 0xDEADBEEFu), crc32c_portable(p, length, 0xDEADBEEFu)) << offset << " " << length;
    }
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), crc32c_portable(bytes.data(), bytes.size()));
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
}

}  // namespace
}  // namespace dt
