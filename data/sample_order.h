// The order in which a data loader visits the samples of an epoch.
//
// sample_at(epoch, k) is the index of the sample that global position k of that epoch reads:
// k itself without shuffling; with shuffling, a pseudorandom permutation of [0, n) that depends
// only on (seed, epoch) — a 4-round Feistel network over the next power of four, cycle-walked
// back into [0, n) — so it needs no memory and no pass over the data, and any process can
// compute any position without talking to the others.
#pragma once

#include <cstdint>

namespace dt {

class SampleOrder {
 public:
  // n samples per epoch; shuffle = false visits them in order.
  SampleOrder(int64_t n, uint64_t seed, bool shuffle);
  int64_t size() const { return n_; }
  int64_t sample_at(int64_t epoch, int64_t k) const;

 private:
  uint64_t permute(uint64_t x, uint64_t key) const;
  int64_t n_;
  uint64_t seed_;
  bool shuffle_;
  int half_bits_ = 1;  // the permuted domain is [0, 4^half_bits)
};

}  // namespace dt
