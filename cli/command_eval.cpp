#include <cmath>
#include <cstdio>
#include <cstring>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "data/token_dataset.h"
#include "model/transformer.h"
#include "train/evaluate.h"

namespace dt::cli {

int command_eval(int argc, char** argv, int first) {
  Args args("eval", "validation loss and perplexity of a model on token shards");
  declare_model_source_flags(args);
  args.flag("data", "", "directory of token shards (llm.c format, `dtrain data prepare`)")
      .flag("split", "val", "which shards: the files DATA/SPLIT*.bin (val, train, or an llm.c prefix)")
      .flag("seq-len", "256", "tokens per sequence (at most the model's max_seq_len)")
      .flag("batch-size", "8", "sequences per forward pass")
      .flag("batches", "20", "forward passes; the split is read in order from its start");
  if (!args.parse(argc, argv, first)) return 0;
  if (args.get("data").empty()) throw Error("eval: give the shards with --data DIR");
  const ModelWeights weights = model_weights_from_flags(args);
  const ModelConfig& config = weights.layout->config();
  const TokenDataset split(TokenDataset::shards_in(args.get("data"), args.get("split")), config.vocab_size);
  const int batch = static_cast<int>(args.get_int("batch-size")), seq = static_cast<int>(args.get_int("seq-len"));
  Transformer model(config, batch, seq);
  std::memcpy(model.params().all().data, weights.params->all().data, weights.params->all().bytes());
  BatchBuffers scratch(1, batch, seq, Device::cpu);
  const Evaluation e = evaluate(model, split, static_cast<int>(args.get_int("batches")), scratch);
  std::printf("%s on %s/%s*.bin: loss %.4f | perplexity %.2f | %lld tokens\n", weights.origin.c_str(),
              args.get("data").c_str(), args.get("split").c_str(), e.loss, std::exp(e.loss),
              static_cast<long long>(e.tokens));
  return 0;
}

}  // namespace dt::cli
