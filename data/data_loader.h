// The training data loader: global samples in a deterministic, resumable order, prefetched on a
// background thread.
//
// Global sample s is the window of seq_len + 1 tokens starting at token s * seq_len of the
// dataset (tokens: its first seq_len; targets: its last seq_len), llm.c's layout. Position k of
// epoch e reads sample SampleOrder::sample_at(e, k): in order without shuffling, a permutation
// that depends only on (seed, e) with it. A micro-batch of B sequences takes the next B
// positions, so which tokens form global sample k never depends on the micro-batch size or
// on how many processes split the batch. With data parallelism over R ranks, the ranks'
// micro-batches are consecutive: rank r reads positions [r B, (r + 1) B) of each window of R B,
// and every rank advances by R B, so a step reads the same samples however it is split. The
// whole state is (epoch, position), the same on every rank: it goes into checkpoints, and
// restore() resumes exactly, under any number of ranks.
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
  // Rank `rank` of `ranks` data-parallel readers. Throws dt::Error when the dataset holds no
  // window of seq_len + 1 tokens.
  DataLoader(const TokenDataset& dataset, int seq_len, int batch_size, uint64_t seed, bool shuffle, int rank = 0,
             int ranks = 1);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t samples_per_epoch() const { return order_.size(); }
  // Fills tokens and targets (B, T) i32 with this rank's B of the next R B samples and advances
  // the state past all R B.
  void next(Tensor tokens, Tensor targets);
  DataLoaderState state() const;
  void restore(DataLoaderState state);

 private:
  struct Batch {
    DataLoaderState at;  // the state the batch was read from
    std::vector<int32_t> tokens, targets;
  };
  void fill(Batch& batch, DataLoaderState at) const;
  DataLoaderState advanced(DataLoaderState at, int64_t samples) const;  // `samples` positions on
  void prefetch_loop();

  const TokenDataset& dataset_;
  int seq_len_, batch_size_;
  int rank_, ranks_;
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
