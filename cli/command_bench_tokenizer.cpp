#include "bench/tokenizer_bench.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"

namespace dt::cli {

int command_bench_tokenizer(int argc, char** argv, int first) {
  Args args("bench tokenizer", "time Tokenizer::encode_batch over the documents of a text file");
  args.positional("FILE", "the text file")
      .flag("tokenizer", "", "tokenizer.json (required)")
      .flag("doc-separator", "line", "what ends a document: blank-lines, line or file")
      .flag("reps", "5", "timed repetitions (the median is reported)")
      .flag("threads", "0", "OpenMP threads (0: OMP_NUM_THREADS or all cores)");
  if (!args.parse(argc, argv, first)) return 0;
  if (!args.was_given("tokenizer") || args.positionals().size() != 1)
    throw Error(str("bench tokenizer: give --tokenizer and one text file\n", args.usage()));
  run_tokenizer_bench({.tokenizer = args.get("tokenizer"),
                       .text = args.positionals()[0],
                       .separator = parse_doc_separator(args.get("doc-separator")),
                       .reps = static_cast<int>(args.get_int("reps")),
                       .threads = static_cast<int>(args.get_int("threads"))});
  return 0;
}

}  // namespace dt::cli
