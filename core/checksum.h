// CRC-32C (Castagnoli): TFRecord framing in TensorBoard files and checkpoint tensor checksums.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dt {

// `previous` continues a checksum over data given in pieces: crc32c(b, crc32c(a)) is the
// checksum of a followed by b.
// With the processor's CRC-32C instruction where it has one (x86-64's SSE 4.2).
uint32_t crc32c(const void* data, size_t bytes, uint32_t previous = 0);
// The same by table, a byte at a time, on any processor: what crc32c is tested against.
uint32_t crc32c_portable(const void* data, size_t bytes, uint32_t previous = 0);
// The masked form TFRecord stores.
uint32_t masked_crc32c(const void* data, size_t bytes);

}  // namespace dt
