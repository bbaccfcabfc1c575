#include "bench/tokenizer_bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "data/tokenizer.h"

namespace dt {

void run_tokenizer_bench(const TokenizerBenchOptions& options) {
  if (options.reps < 1) throw Error(str("--reps = ", options.reps, ": must be at least 1"));
  if (options.threads > 0) omp_set_num_threads(options.threads);
  const Tokenizer tokenizer = Tokenizer::load(options.tokenizer);
  std::vector<std::string> docs;
  DocumentReader reader({options.text}, options.separator);
  int64_t bytes = 0;
  for (DocumentPiece piece; reader.next(piece);) {
    bytes += static_cast<int64_t>(piece.text.size());
    docs.push_back(std::move(piece.text));
  }
  const int threads = omp_get_max_threads();
  std::printf("# tokenizer %s (vocabulary %d), %zu documents, %.2f MB, %d threads\n", options.tokenizer.c_str(),
              tokenizer.vocab_size(), docs.size(), bytes / 1e6, threads);
  std::printf("# %4s %12s %10s %10s\n", "rep", "tokens", "time(s)", "MB/s");
  tokenizer.encode_batch(docs);  // warm-up
  std::vector<double> rates;
  int64_t tokens = 0;
  for (int rep = 0; rep < options.reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const auto encoded = tokenizer.encode_batch(docs);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tokens = 0;
    for (const auto& ids : encoded) tokens += static_cast<int64_t>(ids.size());
    rates.push_back(bytes / 1e6 / seconds);
    std::printf("  %4d %12lld %10.3f %10.2f\n", rep, static_cast<long long>(tokens), seconds, rates.back());
  }
  std::sort(rates.begin(), rates.end());
  std::printf("result mb_per_s=%.2f tokens=%lld threads=%d\n", rates[rates.size() / 2], static_cast<long long>(tokens), threads);
}

}  // namespace dt
