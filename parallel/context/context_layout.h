// Which tokens of each sequence a context-parallel rank holds. Context parallelism cuts every
// sequence of T tokens into chunks of equal length and gives each of the cp ranks its share:
//
//   plain     cp chunks; rank r holds chunk r. Under a causal mask the last rank's queries
//             attend to the whole sequence and the first's to its own chunk only: rank r does
//             about (2r + 1) / cp² of the attention work.
//   zig-zag   2·cp chunks; rank r holds chunks r and 2·cp − 1 − r, an early one and a late one,
//             so every rank does the same attention work (Brandon et al., 2023; Megatron-LM's
//             and Llama 3's load balancing).
//
// A rank's tokens are its chunks in increasing order, one after another: T / cp of them, whose
// positions in the sequence (for learned positions and rotary angles) positions() gives.
#pragma once

#include <cstdint>
#include <vector>

namespace dt {

struct ContextLayout {
  int ranks = 1, rank = 0;
  bool zigzag = true;
  int64_t seq_len = 1;  // the whole sequence's T: a multiple of chunks()

  int chunks() const { return zigzag ? 2 * ranks : ranks; }
  int64_t chunk_len() const { return seq_len / chunks(); }
  // The chunks rank r holds, in increasing order.
  std::vector<int> chunks_of(int r) const;
  std::vector<int> own_chunks() const { return chunks_of(rank); }
  // The tokens of each sequence this rank holds.
  int64_t local_len() const { return seq_len / ranks; }
  // The position in the sequence of each of this rank's tokens, in order.
  std::vector<int64_t> positions() const;
  // Throws dt::Error unless seq_len splits into chunks() chunks of at least one token.
  void validate() const;
};

}  // namespace dt
