#include "core/checksum.h"

#include <gtest/gtest.h>

namespace dt {
namespace {

TEST(Checksum, Crc32cMatchesTheStandardCheckValueAndContinuesOverPieces) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value (RFC 3720)
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

}  // namespace
}  // namespace dt
