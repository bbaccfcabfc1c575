// The training data loader: global samples in a deterministic, resumable order, prefetched on a
// background thread.
//
// Global sample s is the window of seq_len + 1 tokens starting at token s * seq_len of the
// dataset (tokens: its first seq_len; targets: its last seq_len), llm.c's layout. Position k of
// epoch e reads sample SampleOrder::sample_at(e, k): in order without shuffling, a permutation
// that depends only on (seed, e) with it. A micro-batch of B sequences takes the next B
// positions, so which tokens form global sample k never depends on the micro-batch size or
// (later) on how many processes split the batch. The whole state is (epoch, position): it
// goes into checkpoints, and restore() resumes exactly.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/sample_order.h"
#include "data/token_dataset.h"

namespace dt {

struct DataLoaderState {
  int64_t epoch = 0;
  int64_t position = 0;  // the next position within the epoch
  bool operator==(const DataLoaderState&) const = default;
};

class DataLoader {
 public:
  // Throws dt::Error when the dataset holds no window of seq_len + 1 tokens.
  DataLoader(const TokenDataset& dataset, int seq_len, int batch_size, uint64_t seed, bool shuffle);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t samples_per_epoch() const { return order_.size(); }
  // Fills tokens and targets (B, T) i32 with the next B samples and advances the state.
  void next(Tensor tokens, Tensor targets);
  DataLoaderState state() const;
  void restore(DataLoaderState state);

 private:
  struct Batch {
    DataLoaderState at;  // the state the batch was read from
    std::vector<int32_t> tokens, targets;
  };
  void fill(Batch& batch, DataLoaderState at) const;
  DataLoaderState advanced(DataLoaderState at) const;
  void prefetch_loop();

  const TokenDataset& dataset_;
  int seq_len_, batch_size_;
  SampleOrder order_;

  // The background thread reads the batch at `wanted_` into `ready_` while training runs.
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  DataLoaderState state_;
  Batch ready_;
  bool ready_valid_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace dt
