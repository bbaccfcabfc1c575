#include "data/data_loader.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dt {

namespace {

int64_t windows(const TokenDataset& dataset, int seq_len) {
  if (seq_len < 1) throw Error(str("sequence length ", seq_len, " must be at least 1"));
  if (dataset.size() < seq_len + 1)
    throw Error(str("the dataset holds ", dataset.size(), " tokens, fewer than one sequence of seq_len + 1 = ",
                    seq_len + 1, "; use more data or a shorter sequence"));
  return (dataset.size() - 1) / seq_len;
}

}  // namespace

DataLoader::DataLoader(const TokenDataset& dataset, int seq_len, int batch_size, uint64_t seed, bool shuffle, int rank,
                       int ranks)
    : dataset_(dataset),
      seq_len_(seq_len),
      batch_size_(batch_size),
      rank_(rank),
      ranks_(ranks),
      order_(windows(dataset, seq_len), seed, shuffle) {
  if (batch_size < 1) throw Error(str("batch size ", batch_size, " must be at least 1"));
  DT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "data loader rank ", rank, " of ", ranks);
  worker_ = std::thread([this] { prefetch_loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

DataLoaderState DataLoader::advanced(DataLoaderState at, int64_t samples) const {
  at.position += samples;
  while (at.position >= order_.size()) at.position -= order_.size(), ++at.epoch;
  return at;
}

void DataLoader::fill(Batch& batch, DataLoaderState at) const {
  batch.at = at;
  batch.tokens.resize(static_cast<size_t>(batch_size_) * seq_len_);
  batch.targets.resize(batch.tokens.size());
  std::vector<int32_t> window(static_cast<size_t>(seq_len_) + 1);
  at = advanced(at, int64_t{rank_} * batch_size_);  // the ranks before this one read first
  for (int b = 0; b < batch_size_; ++b) {
    const int64_t sample = order_.sample_at(at.epoch, at.position);
    dataset_.read(sample * seq_len_, window);
    std::copy_n(window.begin(), seq_len_, batch.tokens.begin() + int64_t{b} * seq_len_);
    std::copy_n(window.begin() + 1, seq_len_, batch.targets.begin() + int64_t{b} * seq_len_);
    at = advanced(at, 1);
  }
}

void DataLoader::prefetch_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !ready_valid_ || !(ready_.at == state_); });
    if (stopping_) return;
    const DataLoaderState wanted = state_;
    lock.unlock();
    Batch batch;
    try {
      fill(batch, wanted);
    } catch (const std::exception&) {
      // An empty batch: next() reads it again itself and reports the error to the caller.
      batch = Batch{.at = wanted, .tokens = {}, .targets = {}};
    }
    lock.lock();
    ready_ = std::move(batch);
    ready_valid_ = true;
    changed_.notify_all();
  }
}

void DataLoader::next(Tensor tokens, Tensor targets) {
  DT_CHECK(tokens.dtype == DType::i32 && targets.dtype == DType::i32 && tokens.numel() == int64_t{batch_size_} * seq_len_ &&
               targets.shape == tokens.shape,
           "data loader of ", batch_size_, " x ", seq_len_, " given ", tokens.describe(), " and ", targets.describe());
  Batch batch;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return ready_valid_ && ready_.at == state_; });
    batch = std::move(ready_);
    ready_valid_ = false;
    // Advancing under the same lock lets the worker start on the following batch at once.
    if (!batch.tokens.empty()) state_ = advanced(batch.at, int64_t{ranks_} * batch_size_);
  }
  changed_.notify_all();
  if (batch.tokens.empty()) {
    fill(batch, batch.at);  // the prefetch failed: read here, so its error reaches the caller
    {
      std::lock_guard lock(mutex_);
      state_ = advanced(batch.at, int64_t{ranks_} * batch_size_);
    }
    changed_.notify_all();
  }
  std::memcpy(tokens.data, batch.tokens.data(), batch.tokens.size() * sizeof(int32_t));
  std::memcpy(targets.data, batch.targets.data(), batch.targets.size() * sizeof(int32_t));
}

DataLoaderState DataLoader::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void DataLoader::restore(DataLoaderState state) {
  DT_CHECK(state.epoch >= 0 && state.position >= 0 && state.position < order_.size(), "data loader state (epoch ",
           state.epoch, ", position ", state.position, ") outside an epoch of ", order_.size(), " samples");
  {
    std::lock_guard lock(mutex_);
    state_ = state;
    ready_valid_ = false;
  }
  changed_.notify_all();
}

}  // namespace dt
