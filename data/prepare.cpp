#include "data/prepare.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "core/error.h"
#include "data/token_shard.h"

namespace dt {

namespace {

// One split's shards: PREFIX_000000.bin, PREFIX_000001.bin, ..., each started when the
// previous one is full.
class ShardSequence {
 public:
  ShardSequence(std::filesystem::path dir, std::string prefix, int64_t vocab_size, int64_t shard_tokens)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), vocab_size_(vocab_size), shard_tokens_(shard_tokens) {}

  void append(std::span<const uint32_t> tokens) {
    while (!tokens.empty()) {
      if (!writer_) {
        char name[64];
        std::snprintf(name, sizeof name, "%s_%06zu.bin", prefix_.c_str(), shards_.size());
        shards_.push_back(dir_ / name);
        writer_ = std::make_unique<TokenShardWriter>(shards_.back(), vocab_size_);
      }
      const size_t n = std::min<size_t>(tokens.size(), static_cast<size_t>(shard_tokens_ - writer_->size()));
      writer_->append(tokens.first(n));
      tokens = tokens.subspan(n);
      tokens_ += static_cast<int64_t>(n);
      if (writer_->size() == shard_tokens_) finish();
    }
  }
  void finish() {
    if (writer_) writer_->finish();
    writer_.reset();
  }
  int64_t tokens() const { return tokens_; }
  const std::vector<std::filesystem::path>& shards() const { return shards_; }

 private:
  std::filesystem::path dir_;
  std::string prefix_;
  int64_t vocab_size_, shard_tokens_, tokens_ = 0;
  std::vector<std::filesystem::path> shards_;
  std::unique_ptr<TokenShardWriter> writer_;
};

void check_options(const PrepareOptions& o) {
  if (o.shard_tokens < 1) throw Error(str("--shard-tokens = ", o.shard_tokens, ": must be at least 1"));
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    throw Error(str("--val-fraction = ", o.val_fraction, ": must be in [0, 1)"));
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec || !std::filesystem::is_directory(o.out_dir))
    throw Error(str("cannot create output directory '", o.out_dir.string(), "': ",
                    ec ? ec.message() : "a file is in the way", "; choose another --out"));
  // Probe now rather than after encoding the first shard's worth of text.
  const auto probe = o.out_dir / ".dtrain_write_probe";
  if (std::FILE* f = std::fopen(probe.c_str(), "w"); f != nullptr) {
    std::fclose(f);
    std::filesystem::remove(probe, ec);
  } else {
    throw Error(str("cannot write to output directory '", o.out_dir.string(), "'; check its permissions or choose another --out"));
  }
}

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  void update(int64_t bytes, int64_t total_bytes, int64_t tokens, bool last = false) {
    if (!enabled_) return;
    const double now = seconds();
    if (!last && now - drawn_ < 0.2) return;
    drawn_ = now;
    std::fprintf(stderr, "\r%8.1f / %.1f MB  %3.0f%%  %7.1f MB/s  %12lld tokens", bytes / 1e6, total_bytes / 1e6,
                 100.0 * bytes / std::max<int64_t>(total_bytes, 1), bytes / 1e6 / std::max(now, 1e-9),
                 static_cast<long long>(tokens));
    if (last) std::fputc('\n', stderr);
  }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double drawn_ = -1;
};

}  // namespace

PrepareSummary prepare_data(const Tokenizer& tokenizer, const PrepareOptions& options) {
  const uint32_t eot = static_cast<uint32_t>(tokenizer.eot_token());
  DocumentReader reader(options.inputs, options.separator, options.block_bytes);
  check_options(options);
  Progress progress(options.progress);
  ShardSequence val(options.out_dir, "val", tokenizer.vocab_size(), options.shard_tokens);
  ShardSequence train(options.out_dir, "train", tokenizer.vocab_size(), options.shard_tokens);
  const double val_bytes = options.val_fraction * static_cast<double>(reader.total_bytes());
  PrepareSummary summary;
  bool in_val = options.val_tokens > 0 || (options.val_tokens < 0 && val_bytes > 0);
  std::vector<std::string> texts;
  std::vector<bool> starts;
  std::vector<int64_t> offsets;  // input bytes consumed before each piece
  std::vector<uint32_t> tokens;
  DocumentPiece piece;
  bool more = true;
  while (more) {
    texts.clear(), starts.clear(), offsets.clear();
    for (size_t bytes = 0; bytes < options.batch_bytes;) {
      const int64_t offset = reader.bytes_consumed();
      if (!(more = reader.next(piece))) break;
      bytes += piece.text.size();
      offsets.push_back(offset);
      starts.push_back(piece.starts_document);
      texts.push_back(std::move(piece.text));
    }
    const auto encoded = tokenizer.encode_batch(texts);
    for (size_t i = 0; i < texts.size(); ++i) {
      if (starts[i]) {
        ++summary.documents;
        // A document goes wholly to one split: the split is decided at its start.
        if (in_val)
          in_val = options.val_tokens >= 0 ? val.tokens() < options.val_tokens
                                           : static_cast<double>(offsets[i]) < val_bytes;
      }
      tokens.clear();
      if (starts[i]) tokens.push_back(eot);
      tokens.insert(tokens.end(), encoded[i].begin(), encoded[i].end());
      (in_val ? val : train).append(tokens);
    }
    summary.bytes = reader.bytes_read();
    progress.update(summary.bytes, reader.total_bytes(), val.tokens() + train.tokens());
  }
  val.finish();
  train.finish();
  progress.update(summary.bytes, reader.total_bytes(), val.tokens() + train.tokens(), true);
  summary.train_tokens = train.tokens();
  summary.val_tokens = val.tokens();
  summary.train_shards = train.shards();
  summary.val_shards = val.shards();
  summary.seconds = progress.seconds();
  return summary;
}

}  // namespace dt
