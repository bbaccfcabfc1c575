// Docs that cannot go stale: README.md and docs/*.md checked against the code and the built
// `dtrain`. Every failure names the file, the line and the fix.
//
// DocsConfig.EveryKeyIsDocumentedWithItsDefault
//   docs/config.md has a `## [section]` heading per section and, under it, a table whose rows
//   are `| \`key\` | default | meaning |` (one row may name several keys, `beta1`, `beta2`, with
//   as many comma-separated defaults). Every key train/run_config_keys.cpp accepts has a row,
//   and every row names an accepted key. A default is either a TOML value (`"cpu"`, 1000, 3e-4,
//   true), equal as a value (3e-4 equals 0.0003, 1 equals 1.0) to what the key's ConfigKey::write
//   gives for a RunConfig as declared (its initialisers) or as loading resolves a file that leaves
//   the key out (a llama model given field by field, so that the rotary and grouped-query keys
//   apply; log.run_dir "" resolves to runs/<file name>), or one of these words, each checked as
//   far as the code allows:
//     required      leaving the key out is an error that names it (load_run_config or, for the
//                   files a run reads, check_run_inputs)
//     the preset's  the key comes from model.preset; without a preset it is required (as above)
//     —             no value: the code writes "" or 0
//     `other_key`   another key of the section: the code writes 0 or "" (unset, meaning that key)
//
// DocsCommands.EveryCommandLineNamesARealCommandAndItsFlags
//   Every `dtrain` command line in README.md and docs/*.md — a line of a code block, or an
//   inline code span, whose first word is `dtrain` (or a path ending in /dtrain), alone or after
//   `mpirun ...` / `srun ...` — names a command that `dtrain --help` lists and only flags that
//   `dtrain <command> --help` lists (commands declare their flags with cli/args.h and print them
//   there; there is no other registry). Operands and placeholders (CONFIG.toml, N, DIR,
//   key=value) are not checked; `a|b` in the command's place is each of a and b; `<command>`
//   stands for any command, so only --help may follow it. A line whose command word ends in ':'
//   is the program's output (`dtrain plan: configs/...`), not a command.
//
// DocsLinks.EveryRelativeLinkResolves
//   Every link `[text](path)`, `[text](path#anchor)` or `[text](#anchor)` outside code in
//   README.md and docs/*.md whose target has no scheme (http:, https:, mailto:) names an existing
//   file relative to the linking file, and an anchor names a heading of the target Markdown file
//   by GitHub's slug: lowercase, characters other than letters, digits, '_', '-' and spaces
//   removed, spaces turned to '-', a repeated slug given -1, -2, ... (non-ASCII bytes are kept,
//   as GitHub keeps letters; no heading now has any).
//
// DocsImages.EveryDrawnPictureIsWhatItsCommandDrawsNow
//   A picture under docs/images/ that a documented command wrote (`--svg docs/images/NAME.svg`)
//   is byte for byte what that command writes now.
//
// DocsCommands.EveryOutputShownIsWhatTheCommandPrintsNow
//   A fenced code block whose first line is `$ dtrain ...` shows, on its other lines, exactly
//   what that command prints now, run from the repository root (so it must write no file there).
//   README.md shows `dtrain --help`; docs/commands.md shows every command's `--help`.
//   DTRAIN_UPDATE_DOCS=1 rewrites the blocks instead of comparing.
//
// DocsCommands.TheCheapCommandLinesRun
//   Every documented command line of `plan`, `plan schedule`, `model info` or `config show`, and
//   every `train` line as `config show` with its operands (the configuration and layout checked,
//   nothing trained), runs and exits 0, unless it holds a placeholder (CONFIG.toml, N, DIR, a|b,
//   key=S) or, for the commands that take a configuration, names none (`dtrain plan` in prose).
//
// DocsReadme.NamesEveryDirectoryAndEveryPage
//   README.md's layout block (under "## Layout", lines `name/  what it holds`) lists every
//   directory of the repository but hidden ones and those .gitignore ignores at the root, and
//   nothing else; its text links every docs/*.md page.
#include <fnmatch.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"
#include "train/run_config.h"
#include "train/run_config_keys.h"

namespace dt {
namespace {

namespace fs = std::filesystem;
using testing::run_dtrain;

const fs::path kSource = DTRAIN_SOURCE_DIR;

// ---- Markdown, as far as these checks need it ----

struct Markdown {
  std::string name;  // relative to the source tree: "README.md", "docs/config.md"
  fs::path path;
  std::vector<std::string> lines;
  std::vector<bool> code;  // the line is inside a fenced or indented code block
};

Markdown read_markdown(const fs::path& path) {
  Markdown doc{fs::relative(path, kSource).generic_string(), path, {}, {}};
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) doc.lines.push_back(line);
  bool fenced = false, previous_blank = true, previous_code = false;
  for (const std::string& line : doc.lines) {
    const bool fence = line.rfind("```", 0) == 0 || line.rfind("~~~", 0) == 0;
    const bool blank = line.find_first_not_of(" \t") == std::string::npos;
    bool code = false;
    if (fence) {
      code = true;
      fenced = !fenced;
    } else if (fenced) {
      code = true;
    } else if ((line.rfind("    ", 0) == 0 || line.rfind("\t", 0) == 0) && !blank) {
      code = previous_blank || previous_code;  // an indented block starts after a blank line
    } else if (blank && previous_code) {
      code = true;  // a blank line inside an indented block keeps it going
    }
    doc.code.push_back(code);
    previous_blank = blank;
    previous_code = code && !fence && !fenced;  // inside an indented block
  }
  return doc;
}

// README.md and docs/*.md.
std::vector<Markdown> documents() {
  std::vector<Markdown> docs{read_markdown(kSource / "README.md")};
  std::vector<fs::path> pages;
  for (const auto& entry : fs::directory_iterator(kSource / "docs"))
    if (entry.path().extension() == ".md") pages.push_back(entry.path());
  std::sort(pages.begin(), pages.end());
  for (const auto& page : pages) docs.push_back(read_markdown(page));
  return docs;
}

// A paragraph of prose (consecutive non-blank lines outside code), joined with '\n'.
struct Paragraph {
  int first_line;  // 1-based
  std::string text;
};

std::vector<Paragraph> paragraphs(const Markdown& doc) {
  std::vector<Paragraph> out;
  for (size_t i = 0; i < doc.lines.size(); ++i) {
    const bool blank = doc.lines[i].find_first_not_of(" \t") == std::string::npos;
    if (doc.code[i] || blank) continue;
    if (i == 0 || doc.code[i - 1] || doc.lines[i - 1].find_first_not_of(" \t") == std::string::npos)
      out.push_back({static_cast<int>(i) + 1, doc.lines[i]});
    else
      out.back().text += "\n" + doc.lines[i];
  }
  return out;
}

int line_at(const Paragraph& p, size_t offset) {
  return p.first_line + static_cast<int>(std::count(p.text.begin(), p.text.begin() + offset, '\n'));
}

// The inline code spans of a paragraph: content (newlines as spaces) and the line it starts on.
struct Span {
  int line;
  std::string text;
  size_t begin, end;  // the span's backticks included, offsets in the paragraph
};

std::vector<Span> code_spans(const Paragraph& p) {
  std::vector<Span> spans;
  const std::string& t = p.text;
  for (size_t i = 0; i < t.size();) {
    if (t[i] != '`') {
      ++i;
      continue;
    }
    size_t n = 0;
    while (i + n < t.size() && t[i + n] == '`') ++n;
    const std::string run(n, '`');
    size_t close = t.find(run, i + n);
    while (close != std::string::npos && close + n < t.size() && t[close + n] == '`')
      close = t.find(run, close + n + 1);
    if (close == std::string::npos) {
      i += n;
      continue;
    }
    std::string content = t.substr(i + n, close - i - n);
    std::replace(content.begin(), content.end(), '\n', ' ');
    spans.push_back({line_at(p, i), content, i, close + n});
    i = close + n;
  }
  return spans;
}

// ---- dtrain's commands and flags, from the binary ----

// The commands `dtrain --help` lists ("train", "plan schedule", ...).
std::vector<std::string> help_commands() {
  const auto help = run_dtrain("--help");
  EXPECT_EQ(help.status, 0) << help.output;
  std::vector<std::string> commands;
  std::istringstream lines(help.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  ", 0) != 0 || line.size() < 3 || line[2] == ' ' || line[2] == '-') continue;
    const size_t end = line.find("  ", 2);
    commands.push_back(line.substr(2, end == std::string::npos ? std::string::npos : end - 2));
  }
  EXPECT_GE(commands.size(), 10u) << "dtrain --help lists too few commands to parse:\n" << help.output;
  return commands;
}

// The flags `dtrain <command> --help` lists, without their dashes.
std::set<std::string> help_flags(const std::string& command) {
  const auto help = run_dtrain(command + " --help");
  EXPECT_EQ(help.status, 0) << "dtrain " << command << " --help\n" << help.output;
  std::set<std::string> flags;
  std::istringstream lines(help.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) != 0) continue;
    flags.insert(line.substr(4, line.find(' ', 4) - 4));
  }
  return flags;
}

std::string joined(const std::set<std::string>& names, const std::string& prefix) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + prefix + n;
  return out.empty() ? "none" : out;
}

// Shell words: spaces separate, quotes group.
std::vector<std::string> shell_words(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (const char c : text) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        word += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

bool is_dtrain(const std::string& word) {
  return word == "dtrain" || (word.size() > 7 && word.ends_with("/dtrain"));
}

// A command line found in the docs: where, as written, and its words after `dtrain`.
struct CommandLine {
  std::string where;  // "README.md:95"
  std::string text;
  std::vector<std::string> words;
};

// The words after `dtrain` when `text` is a dtrain command line, alone or behind a launcher.
std::optional<std::vector<std::string>> dtrain_words(const std::string& text) {
  const std::vector<std::string> words = shell_words(text);
  const auto at = std::find_if(words.begin(), words.end(), is_dtrain);
  if (at == words.end()) return std::nullopt;
  if (at != words.begin() && words.front() != "mpirun" && words.front() != "srun") return std::nullopt;
  return std::vector<std::string>(at + 1, words.end());
}

std::vector<CommandLine> documented_command_lines() {
  std::vector<CommandLine> out;
  for (const Markdown& doc : documents()) {
    for (size_t i = 0; i < doc.lines.size(); ++i) {
      if (!doc.code[i]) continue;
      const int first = static_cast<int>(i) + 1;
      std::string text = doc.lines[i];
      while (text.ends_with("\\") && i + 1 < doc.lines.size() && doc.code[i + 1])
        text = text.substr(0, text.size() - 1) + " " + doc.lines[++i];
      if (auto words = dtrain_words(text)) out.push_back({str(doc.name, ":", first), text, *words});
    }
    for (const Paragraph& p : paragraphs(doc))
      for (const Span& span : code_spans(p))
        if (auto words = dtrain_words(span.text)) out.push_back({str(doc.name, ":", span.line), span.text, *words});
  }
  return out;
}

// "a|b\|c" -> {"a", "b", "c"}.
std::vector<std::string> alternatives(const std::string& word) {
  std::vector<std::string> out;
  std::string part;
  for (const char c : word) {
    if (c == '|' || c == '\\') {
      if (!part.empty()) out.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  if (!part.empty()) out.push_back(part);
  return out;
}

TEST(DocsCommands, EveryCommandLineNamesARealCommandAndItsFlags) {
  const std::vector<std::string> commands = help_commands();
  std::map<std::string, std::set<std::string>> flags;
  for (const auto& c : commands) flags[c] = help_flags(c);
  std::set<std::string> listed(commands.begin(), commands.end());

  const std::vector<CommandLine> lines = documented_command_lines();
  EXPECT_GE(lines.size(), 20u) << "found too few dtrain command lines in the docs: is the parser broken?";
  for (const CommandLine& line : lines) {
    const auto& w = line.words;
    if (w.empty()) continue;  // `dtrain` alone names the program
    if (w[0].ends_with(":") || (w.size() > 1 && w[1].ends_with(":") && !w[1].starts_with("-")))
      continue;  // output: "dtrain plan: configs/..."
    // The command (each alternative of "step|gemm"), and how many words it takes.
    std::vector<std::string> named;
    size_t operands = 1;
    if (w[0].starts_with("<")) {
      named.push_back("");  // any command: only --help is certain
    } else if (w.size() > 1 && listed.count(w[0] + " " + alternatives(w[1]).front())) {
      for (const auto& sub : alternatives(w[1])) named.push_back(w[0] + " " + sub);
      operands = 2;
    } else {
      // "bench gemmm" is named whole when "bench" only starts commands.
      const bool prefix = std::any_of(commands.begin(), commands.end(),
                                      [&](const std::string& c) { return c.starts_with(w[0] + " "); });
      named.push_back(prefix && !listed.count(w[0]) && w.size() > 1 ? w[0] + " " + w[1] : w[0]);
    }
    for (const std::string& command : named) {
      if (!command.empty() && !listed.count(command)) {
        ADD_FAILURE() << line.where << ": `" << line.text << "` names the command 'dtrain " << command
                      << "', which `dtrain --help` does not list; fix the command to one of its list";
        continue;
      }
      const std::set<std::string> accepted = command.empty() ? std::set<std::string>{} : flags[command];
      for (size_t i = operands; i < w.size(); ++i) {
        for (std::string flag : alternatives(w[i])) {
          flag.erase(0, flag.find_first_not_of("[("));
          if (!flag.starts_with("--")) continue;
          flag = flag.substr(2, flag.find_first_of("=])},.;:`", 2) - 2);
          if (flag == "help" || flag.empty() || accepted.count(flag)) continue;
          ADD_FAILURE() << line.where << ": `" << line.text << "` gives --" << flag << ", which `dtrain "
                        << (command.empty() ? "<command>" : command)
                        << " --help` does not list; remove it or write one of its flags: "
                        << joined(accepted, "--");
        }
      }
    }
  }
}

// A shown run: a fenced code block whose first line is `$ dtrain ...`, the rest the command's
// output.
struct ShownRun {
  size_t prompt;     // 0-based line of `$ dtrain ...`
  size_t end;        // 0-based line of the closing fence
  std::string args;  // the words after `dtrain`
};

std::vector<ShownRun> shown_runs(const Markdown& doc) {
  std::vector<ShownRun> out;
  for (size_t i = 0; i + 1 < doc.lines.size(); ++i) {
    if (doc.lines[i].rfind("```", 0) != 0) continue;
    size_t end = i + 1;
    while (end < doc.lines.size() && doc.lines[end].rfind("```", 0) != 0) ++end;
    const std::string& first = doc.lines[i + 1];
    if (first.rfind("$ dtrain ", 0) == 0) out.push_back({i + 1, end, first.substr(9)});
    i = end;
  }
  return out;
}

std::vector<std::string> output_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every shown run in README.md and docs/ shows what its command prints now, run from the
// repository root; README.md shows `dtrain --help` and docs/commands.md every command's. With
// DTRAIN_UPDATE_DOCS=1 the blocks are rewritten from the commands instead (the test then checks
// only that every command's help is shown).
TEST(DocsCommands, EveryOutputShownIsWhatTheCommandPrintsNow) {
  const bool update = std::getenv("DTRAIN_UPDATE_DOCS") != nullptr;
  std::map<std::string, std::set<std::string>> shown;  // document -> the args of its shown runs
  for (const Markdown& doc : documents()) {
    std::vector<std::string> rewritten = doc.lines;
    const std::vector<ShownRun> runs = shown_runs(doc);
    for (auto run = runs.rbegin(); run != runs.rend(); ++run) {  // from the end: lines move
      shown[doc.name].insert(run->args);
      const auto result =
          testing::run_command(str("cd '", kSource.string(), "' && ", DTRAIN_BINARY_DIR, "/dtrain ", run->args));
      EXPECT_EQ(result.status, 0) << doc.name << ":" << run->prompt + 1 << ": `dtrain " << run->args << "` fails:\n"
                                  << result.output;
      const std::vector<std::string> printed = output_lines(result.output);
      const std::vector<std::string> written(doc.lines.begin() + static_cast<long>(run->prompt) + 1,
                                             doc.lines.begin() + static_cast<long>(run->end));
      if (update) {
        rewritten.erase(rewritten.begin() + static_cast<long>(run->prompt) + 1,
                        rewritten.begin() + static_cast<long>(run->end));
        rewritten.insert(rewritten.begin() + static_cast<long>(run->prompt) + 1, printed.begin(), printed.end());
        continue;
      }
      const auto differ = std::mismatch(written.begin(), written.end(), printed.begin(), printed.end());
      if (differ.first == written.end() && differ.second == printed.end()) continue;
      const size_t at = static_cast<size_t>(differ.first - written.begin());
      ADD_FAILURE() << doc.name << ":" << run->prompt + 2 + at << ": the output shown for `dtrain " << run->args
                    << "` is not what it prints now:\n  shown:   "
                    << (differ.first == written.end() ? "(the block ends)" : *differ.first) << "\n  printed: "
                    << (differ.second == printed.end() ? "(the output ends)" : *differ.second)
                    << "\nrewrite the block with the command's output (docs/commands.md says how)";
    }
    if (update && rewritten != doc.lines) {
      std::ofstream out(doc.path);
      for (const std::string& line : rewritten) out << line << "\n";
    }
  }
  EXPECT_TRUE(shown["README.md"].count("--help")) << "README.md shows no `$ dtrain --help` block (its command list)";
  for (const std::string& command : help_commands())
    EXPECT_TRUE(shown["docs/commands.md"].count(command + " --help"))
        << "docs/commands.md does not show `dtrain " << command << " --help`; add a section for it, with a block "
        << "```\n$ dtrain " << command << " --help\n``` (DTRAIN_UPDATE_DOCS=1 fills it in)";
}

// A word the reader replaces: CONFIG.toml, T.json, N, DIR, RUN/config.toml, FILES..., a|b,
// <command>, key=S.
bool is_placeholder(const std::string& word) {
  static const std::regex placeholder(R"((^|/)[A-Z][A-Z0-9_]*(/|(\.[a-z]+)?$)|[|<>\[\]]|\.\.\.|…)");
  return std::regex_search(word.substr(word.find('=') + 1), placeholder);
}

// Every documented command line that is cheap and complete runs and succeeds: `plan`, `plan
// schedule`, `model info` and `config show` as written, and `train` as `config show` with the
// same operands (which loads and checks the configuration and its layout, and trains nothing).
// Lines with a placeholder are skipped; shown runs have their own test. Each runs in an empty
// directory, the repository's files named by absolute path, so nothing is written into the tree.
TEST(DocsCommands, TheCheapCommandLinesRun) {
  const std::set<std::string> cheap = {"plan", "plan schedule", "model info", "config show"};
  int ran = 0;
  for (const CommandLine& line : documented_command_lines()) {
    std::vector<std::string> w = line.words;
    if (w.empty() || std::any_of(w.begin(), w.end(), is_placeholder)) continue;
    if (w[0] == "train") {
      w[0] = "config";
      w.insert(w.begin() + 1, "show");
    }
    const size_t words = w.size() > 1 && cheap.count(w[0] + " " + w[1]) ? 2 : 1;
    const std::string command = words == 2 ? w[0] + " " + w[1] : w[0];
    if (!cheap.count(command) || std::find(w.begin(), w.end(), "--help") != w.end()) continue;
    // `dtrain plan` in a sentence names the command; a line to run gives its configuration.
    const bool takes_config = command == "plan" || command == "config show";
    if (takes_config && std::none_of(w.begin(), w.end(), [](const std::string& x) { return x.ends_with(".toml"); }))
      continue;
    const testing::TempDir dir;
    std::string args;
    for (size_t i = 0; i < w.size(); ++i) {
      std::string word = w[i];
      if (i > 0 && w[i - 1] == "--svg")
        word = (dir.path() / "drawn.svg").string();
      else if (i >= words && !word.starts_with("-") && word.find('=') == std::string::npos &&
               fs::exists(kSource / word))
        word = (kSource / word).string();
      args += str(args.empty() ? "" : " ", "'", word, "'");
    }
    const auto result =
        testing::run_command(str("cd '", dir.path().string(), "' && ", DTRAIN_BINARY_DIR, "/dtrain ", args));
    EXPECT_EQ(result.status, 0) << line.where << ": `" << line.text << "` fails (run as `dtrain " << args
                                << "`):\n" << result.output;
    std::printf("ran %s: %s\n", line.where.c_str(), line.text.c_str());
    ++ran;
  }
  EXPECT_GE(ran, 5) << "ran too few documented command lines: is the parser broken?";
}

// ---- The README's map ----

// The README's layout block names every directory of the repository (those git ignores, by
// .gitignore's root patterns, and hidden ones aside) and only those; its table links every page
// of docs/.
TEST(DocsReadme, NamesEveryDirectoryAndEveryPage) {
  const Markdown readme = read_markdown(kSource / "README.md");
  std::vector<std::string> ignored;  // "/build*/" -> "build*"
  std::ifstream gitignore(kSource / ".gitignore");
  for (std::string line; std::getline(gitignore, line);)
    if (line.size() > 2 && line.front() == '/' && line.back() == '/')
      ignored.push_back(line.substr(1, line.size() - 2));
  std::set<std::string> directories;
  for (const auto& entry : fs::directory_iterator(kSource)) {
    const std::string name = entry.path().filename().string();
    const bool is_ignored = std::any_of(ignored.begin(), ignored.end(), [&](const std::string& pattern) {
      return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
    });
    if (entry.is_directory() && !name.starts_with(".") && !is_ignored) directories.insert(name);
  }
  std::set<std::string> listed;
  bool in_layout = false;
  static const std::regex entry(R"(^([a-z_]+)/ )");
  for (size_t i = 0; i < readme.lines.size(); ++i) {
    const std::string& line = readme.lines[i];
    if (!readme.code[i] && line.rfind("## ", 0) == 0) in_layout = line == "## Layout";
    std::smatch m;
    if (!in_layout || !readme.code[i] || !std::regex_search(line, m, entry)) continue;
    listed.insert(m[1].str());
    EXPECT_TRUE(directories.count(m[1].str()))
        << "README.md:" << i + 1 << ": the layout lists " << m[1].str() << "/, which is not a directory of the "
        << "repository; remove the entry or fix its name";
  }
  ASSERT_FALSE(listed.empty()) << "README.md: no layout block under '## Layout' (lines 'name/  what it holds')";
  for (const std::string& directory : directories)
    EXPECT_TRUE(listed.count(directory)) << "README.md: the layout under '## Layout' does not list " << directory
                                         << "/; add a line '" << directory << "/  what it holds'";
  const std::string text = testing::file_bytes(kSource / "README.md");
  for (const auto& page : fs::directory_iterator(kSource / "docs")) {
    if (page.path().extension() != ".md") continue;
    EXPECT_NE(text.find(str("](docs/", page.path().filename().string())), std::string::npos)
        << "README.md links no docs/" << page.path().filename().string() << "; add it to the table at the top";
  }
}

// ---- Links ----

// GitHub's anchor of a heading's text.
// Every picture a page shows that a documented command drew (`dtrain plan schedule ... --svg
// docs/images/NAME.svg`) is what that command draws now: rerun into a temporary file, byte for
// byte.
TEST(DocsImages, EveryDrawnPictureIsWhatItsCommandDrawsNow) {
  int checked = 0;
  for (const CommandLine& line : documented_command_lines()) {
    const auto svg = std::find(line.words.begin(), line.words.end(), "--svg");
    if (svg == line.words.end() || svg + 1 == line.words.end() || !svg[1].starts_with("docs/images/")) continue;
    const testing::TempDir dir;
    std::vector<std::string> words = line.words;
    const fs::path shown = kSource / svg[1], drawn = dir.path() / "drawn.svg";
    words[static_cast<size_t>(svg - line.words.begin()) + 1] = drawn.string();
    std::string args;
    for (const std::string& w : words) args += str(args.empty() ? "" : " ", w);
    const auto result = run_dtrain(args);
    ASSERT_EQ(result.status, 0) << line.where << ": " << line.text << "\n" << result.output;
    EXPECT_EQ(testing::file_bytes(drawn), testing::file_bytes(shown))
        << line.where << ": " << shown.string() << " is not what `" << line.text
        << "` draws now; rerun that command from the repository root to redraw it";
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no page shows a drawn picture (docs/parallelism.md showed a schedule)";
}

std::string github_slug(const std::string& heading) {
  std::string slug;
  for (const char ch : heading) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 'A' && c <= 'Z')
      slug += static_cast<char>(c - 'A' + 'a');
    else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c >= 0x80)
      slug += ch;
    else if (c == ' ')
      slug += '-';
  }
  return slug;
}

std::set<std::string> anchors(const Markdown& doc) {
  std::set<std::string> out;
  std::map<std::string, int> seen;
  static const std::regex heading(R"(^#{1,6}\s+(.*?)\s*#*\s*$)");
  for (size_t i = 0; i < doc.lines.size(); ++i) {
    std::smatch m;
    if (doc.code[i] || !std::regex_match(doc.lines[i], m, heading)) continue;
    const std::string slug = github_slug(m[1].str());
    const int n = seen[slug]++;
    out.insert(n == 0 ? slug : str(slug, "-", n));
  }
  return out;
}

TEST(DocsLinks, EveryRelativeLinkResolves) {
  static const std::regex link(R"(\[([^\]]*)\]\(([^()\s]*)\))");
  int checked = 0;
  for (const Markdown& doc : documents()) {
    for (const Paragraph& p : paragraphs(doc)) {
      std::string prose = p.text;  // code spans blanked, newlines kept
      for (const Span& span : code_spans(p))
        for (size_t i = span.begin; i < span.end; ++i)
          if (prose[i] != '\n') prose[i] = ' ';
      for (auto it = std::sregex_iterator(prose.begin(), prose.end(), link); it != std::sregex_iterator(); ++it) {
        const std::string target = (*it)[2].str();
        if (target.empty() || std::regex_search(target, std::regex("^[a-zA-Z][a-zA-Z0-9+.-]*:"))) continue;
        ++checked;
        const std::string where = str(doc.name, ":", line_at(p, it->position(2)));
        const size_t hash = target.find('#');
        const std::string file = target.substr(0, hash);
        const fs::path resolved = file.empty() ? doc.path : (doc.path.parent_path() / file).lexically_normal();
        if (!fs::exists(resolved)) {
          ADD_FAILURE() << where << ": link (" << target << ") names " << resolved.lexically_relative(kSource).string()
                        << ", which does not exist; fix the path (relative to " << doc.name << ") or remove the link";
          continue;
        }
        if (hash == std::string::npos) continue;
        const std::string anchor = target.substr(hash + 1);
        if (resolved.extension() != ".md") {
          ADD_FAILURE() << where << ": link (" << target << ") has an anchor into a file that is not Markdown";
          continue;
        }
        const std::set<std::string> known = anchors(read_markdown(resolved));
        EXPECT_TRUE(known.count(anchor)) << where << ": link (" << target << "): "
                                         << resolved.lexically_relative(kSource).string() << " has no heading #"
                                         << anchor << "; point it at one of: " << joined(known, "#");
      }
    }
  }
  EXPECT_GE(checked, 10) << "found too few relative links in the docs: is the parser broken?";
}

// ---- Configuration keys ----

// A configuration that gives only what has no default: a llama model field by field (so every
// family-trait key applies), and the data directory.
const std::map<std::string, std::string> kMinimalConfig = {
    {"model.family", "\"llama\""}, {"model.n_layer", "2"},      {"model.d_model", "64"},
    {"model.n_head", "4"},         {"model.vocab_size", "256"}, {"model.max_seq_len", "1024"},
    {"data.dir", "\"no-such-dir\""},
};

// Loads kMinimalConfig without `left_out`; the error it meets ("" when none), checking the
// files a run reads too when `with_inputs`.
std::string load_minimal(const testing::TempDir& dir, const std::string& left_out, RunConfig* out = nullptr) {
  std::map<std::string, std::string> by_section_text;
  for (const auto& [path, value] : kMinimalConfig) {
    if (path == left_out) continue;
    const size_t dot = path.find('.');
    by_section_text[path.substr(0, dot)] += str(path.substr(dot + 1), " = ", value, "\n");
  }
  std::string text;
  for (const auto& [section, body] : by_section_text) text += str("[", section, "]\n", body);
  const std::string file = dir.file("minimal.toml");
  std::ofstream(file) << text;
  try {
    RunConfig config = load_run_config(file);
    if (out) *out = config;
    check_run_inputs(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> split_list(const std::string& cell) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = cell.find(", ", begin);
    out.push_back(cell.substr(begin, comma - begin));
    if (comma == std::string::npos) return out;
    begin = comma + 2;
  }
}

std::string trimmed(std::string s) {
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  return s;
}

// The cells of a table row, `\|` not splitting.
std::vector<std::string> cells(const std::string& row) {
  std::vector<std::string> out;
  std::string cell;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      out.push_back(trimmed(cell));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return out;
}

std::optional<toml::table> parse_toml_value(const std::string& text) {
  try {
    return toml::parse(str("x = ", text), std::string_view("value"));
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

bool same_value(const toml::node& a, const toml::node& b) {
  if (a.is_number() && b.is_number()) return a.value<double>() == b.value<double>();
  if (a.is_string() && b.is_string()) return a.value<std::string>() == b.value<std::string>();
  if (a.is_boolean() && b.is_boolean()) return a.value<bool>() == b.value<bool>();
  return false;
}

TEST(DocsConfig, EveryKeyIsDocumentedWithItsDefault) {
  const Markdown doc = read_markdown(kSource / "docs/config.md");
  testing::TempDir dir;
  RunConfig defaults;
  // The minimal configuration loads; only check_run_inputs objects (there are no shards).
  const std::string minimal_error = load_minimal(dir, "", &defaults);
  ASSERT_NE(minimal_error.find("data.dir"), std::string::npos) << minimal_error;
  ASSERT_EQ(minimal_error.find("model."), std::string::npos) << minimal_error;

  std::map<std::string, int> documented;  // "section.key" -> line
  std::string section;
  for (size_t i = 0; i < doc.lines.size(); ++i) {
    const std::string& line = doc.lines[i];
    const std::string where = str("docs/config.md:", i + 1);
    if (doc.code[i]) continue;
    if (line.rfind("## ", 0) == 0) {
      section = line.size() > 4 && line[3] == '[' && line.back() == ']' ? line.substr(4, line.size() - 5) : "";
      continue;
    }
    if (section.empty() || line.rfind("|", 0) != 0) continue;
    const std::vector<std::string> row = cells(line);
    if (row.size() < 2 || row[0] == "key" || row[0].find_first_not_of("-: ") == std::string::npos) continue;
    std::vector<std::string> names;
    for (const std::string& part : split_list(row[0])) names.push_back(trimmed(part));
    std::vector<std::string> values = split_list(row[1]);
    if (values.size() != names.size()) values.assign(names.size(), row[1]);
    for (size_t k = 0; k < names.size(); ++k) {
      std::string name = names[k], value = trimmed(values[k]);
      if (name.size() < 3 || name.front() != '`' || name.back() != '`') {
        ADD_FAILURE() << where << ": the key cell '" << row[0] << "' is not `key` or `key1`, `key2`";
        continue;
      }
      name = name.substr(1, name.size() - 2);
      const std::string path = str(section, ".", name);
      if (!documented.emplace(path, static_cast<int>(i) + 1).second)
        ADD_FAILURE() << where << ": " << path << " is documented twice (also line " << documented[path]
                      << "); keep one row";
      const run_config::ConfigKey* key = run_config::find_config_key(section, name);
      if (!key) {
        ADD_FAILURE() << where << ": " << path << " is documented but train/run_config_keys.cpp does not accept it"
                      << " (a configuration giving it is rejected); remove the row or correct the key's name";
        continue;
      }
      // The default as declared (RunConfig's initialisers) and as resolved by loading a file
      // that leaves the key out (log.run_dir "" becomes runs/<file name>): either may be written.
      const std::string code_text = key->write(RunConfig{}), resolved_text = key->write(defaults);
      if (value.size() >= 2 && value.front() == '`' && value.back() == '`') value = value.substr(1, value.size() - 2);
      const bool unset = code_text == "\"\"" || code_text == "0";
      if (value == "required" || value == "the preset's") {
        const std::string error = load_minimal(dir, path);
        // The minimal configuration's own error (no shards in data.dir) does not count.
        EXPECT_TRUE(kMinimalConfig.count(path) && error != minimal_error && error.find(name) != std::string::npos)
            << where << ": " << path << " is documented as '" << value << "', but a configuration may leave it"
            << " out" << "; the code's default is "
            << code_text << ": write that";
      } else if (value == "—") {
        EXPECT_TRUE(unset) << where << ": " << path << " is documented as having no default (—), but the code's"
                           << " default is " << code_text << ": write that";
      } else if (run_config::find_config_key(section, value)) {
        EXPECT_TRUE(unset) << where << ": " << path << " is documented as defaulting to `" << value
                           << "`, but the code's default is " << code_text << ": write that";
      } else if (const auto doc_value = parse_toml_value(value)) {
        const auto code_value = parse_toml_value(code_text), resolved_value = parse_toml_value(resolved_text);
        ASSERT_TRUE(code_value && resolved_value) << path << " writes " << code_text << " and " << resolved_text;
        EXPECT_TRUE(same_value(*doc_value->get("x"), *code_value->get("x")) ||
                    same_value(*doc_value->get("x"), *resolved_value->get("x")))
            << where << ": " << path << " is documented with default " << value << ", but the code's default is "
            << code_text << " (" << key->section << "'s initialiser in train/run_config.h or the struct it names; `dtrain"
            << " config show` writes " << resolved_text << " when the key is left out); write " << code_text;
      } else if (kMinimalConfig.count(path)) {
        ADD_FAILURE() << where << ": " << path << "'s default '" << value << "' is neither a TOML value nor one of"
                      << " required, the preset's, — or another key of [" << section << "]; the key has no default"
                      << " (a configuration needs it): write " << (section == "model" ? "the preset's" : "required");
      } else {
        ADD_FAILURE() << where << ": " << path << "'s default '" << value << "' is neither a TOML value nor one of"
                      << " required, the preset's, — or another key of [" << section << "]; the code's default is "
                      << code_text << ": write that";
      }
    }
  }
  for (const run_config::ConfigKey& key : run_config::config_keys())
    EXPECT_TRUE(documented.count(key.path()))
        << "docs/config.md: " << key.path() << " is accepted (train/run_config_keys.cpp) but not documented; add"
        << " under '## [" << key.section << "]' the row | `" << key.name << "` | "
        << (kMinimalConfig.count(key.path()) ? "required" : key.write(RunConfig{})) << " | what it does |";
}

}  // namespace
}  // namespace dt
