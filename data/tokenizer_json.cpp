// Tokenizer::load and Tokenizer::save: Hugging Face's tokenizer.json for byte-level BPE.
//
// The forms read and written (HF tokenizers 0.19 field names):
//   pre_tokenizer  {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
//                  (GPT-2's pattern), or {"type": "Sequence", "pretokenizers": [{"type":
//                  "Split", "pattern": {"Regex": R}, "behavior": "Isolated", "invert": false},
//                  {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}
//                  (Llama 3's form, any regex R)
//   model          {"type": "BPE", "vocab": {key: id}, "merges": ["a b", ...] or [["a", "b"], ...],
//                  "ignore_merges": bool}; keys are bytes written by data/byte_unicode.h
//   added_tokens   [{"id", "content", "special", "lstrip": false, "rstrip": false,
//                  "single_word": false}, ...]
// normalizer must be null; the decoder and post_processor are written as GPT-2's and ignored
// when read (decoding is bytes by construction; see tokenizer.h on post-processing).
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_unicode.h"
#include "data/tokenizer.h"

namespace dt {

namespace {

using nlohmann::json;

struct JsonFile {
  std::string path;
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(str("tokenizer '", path, "': ", field, " ", what));
  }
  const json& at(const json& object, const std::string& field, const std::string& key) const {
    if (!object.is_object() || !object.contains(key)) fail(field + "." + key, "is missing");
    return object.at(key);
  }
  // Fields that must hold one value (or be absent/null) because dtrain implements only that.
  void expect(const json& object, const std::string& field, const std::string& key, const json& supported) const {
    if (!object.contains(key) || object.at(key).is_null() || object.at(key) == supported) return;
    fail(field + "." + key, str("is ", object.at(key).dump(), "; only ", supported.dump(), " is supported"));
  }
};

std::string read_pattern(const JsonFile& file, const json& root) {
  const json& pre = file.at(root, "", "pre_tokenizer");
  const auto byte_level = [&](const json& node, const std::string& field, bool use_regex) {
    if (node.value("type", "") != "ByteLevel") file.fail(field + ".type", str("is ", node.value("type", json()).dump(), "; expected \"ByteLevel\""));
    file.expect(node, field, "add_prefix_space", false);
    file.expect(node, field, "use_regex", use_regex);
  };
  const std::string type = pre.is_object() ? pre.value("type", "") : "";
  if (type == "ByteLevel") {
    byte_level(pre, "pre_tokenizer", true);
    return std::string(kGpt2Pattern);
  }
  if (type == "Sequence") {
    const json& steps = file.at(pre, "pre_tokenizer", "pretokenizers");
    if (!steps.is_array() || steps.size() != 2 || steps[0].value("type", "") != "Split")
      file.fail("pre_tokenizer.pretokenizers", "must be [Split, ByteLevel] (Llama 3's form)");
    const json& split = steps[0];
    file.expect(split, "pre_tokenizer.pretokenizers[0]", "behavior", "Isolated");
    file.expect(split, "pre_tokenizer.pretokenizers[0]", "invert", false);
    const json& pattern = file.at(split, "pre_tokenizer.pretokenizers[0]", "pattern");
    if (!pattern.contains("Regex") || !pattern["Regex"].is_string())
      file.fail("pre_tokenizer.pretokenizers[0].pattern", str("is ", pattern.dump(), "; only {\"Regex\": ...} is supported"));
    byte_level(steps[1], "pre_tokenizer.pretokenizers[1]", false);
    return pattern["Regex"].get<std::string>();
  }
  file.fail("pre_tokenizer", str("is ", pre.dump().substr(0, 200), "; only ByteLevel, or Sequence [Split, ByteLevel], is supported"));
}

TokenizerParts read_parts(const JsonFile& file, const json& root) {
  TokenizerParts parts;
  if (root.contains("normalizer") && !root["normalizer"].is_null())
    file.fail("normalizer", str("is ", root["normalizer"].dump().substr(0, 200), "; byte-level BPE here has none (null)"));
  parts.pattern = read_pattern(file, root);
  const json& model = file.at(root, "", "model");
  if (model.value("type", "BPE") != "BPE") file.fail("model.type", str("is \"", model.value("type", ""), "\"; only \"BPE\" is supported"));
  file.expect(model, "model", "byte_fallback", false);
  file.expect(model, "model", "continuing_subword_prefix", "");
  file.expect(model, "model", "end_of_word_suffix", "");
  file.expect(model, "model", "dropout", 0.0);
  parts.ignore_merges = model.value("ignore_merges", false);

  // Ids: the model's vocabulary and the added tokens together must be 0..V-1.
  const json& vocab = file.at(model, "model", "vocab");
  if (!vocab.is_object()) file.fail("model.vocab", "must be an object of token -> id");
  const json added = root.value("added_tokens", json::array());
  int64_t size = 0;
  for (const auto& [key, id] : vocab.items()) size = std::max<int64_t>(size, id.get<int64_t>() + 1);
  for (const json& t : added) size = std::max<int64_t>(size, t.value("id", int64_t{-1}) + 1);
  std::vector<bool> seen(size, false);
  parts.token_bytes.resize(size);
  for (size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const std::string field = str("added_tokens[", i, "]");
    for (const char* flag : {"lstrip", "rstrip", "single_word"}) file.expect(t, field, flag, false);
    AddedToken token{.id = file.at(t, field, "id").get<int32_t>(), .content = file.at(t, field, "content").get<std::string>(),
                     .special = t.value("special", true)};
    if (token.id < 0) file.fail(field + ".id", str("is ", token.id, "; ids are not negative"));
    seen[token.id] = true;
    parts.added.push_back(std::move(token));
  }
  std::unordered_map<std::string, int32_t> key_to_id;
  for (const auto& [key, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    key_to_id[key] = static_cast<int32_t>(id);
    if (id >= 0 && seen[id]) continue;  // an added token also listed in the vocabulary (GPT-2's <|endoftext|>)
    const auto bytes = unicode_to_bytes(key);
    if (!bytes) file.fail(str("model.vocab[\"", key, "\"]"), "is not a byte-level token (a character outside GPT-2's byte alphabet)");
    if (id < 0) file.fail(str("model.vocab[\"", key, "\"]"), str("is ", id, "; ids are not negative"));
    parts.token_bytes[id] = *bytes;
    seen[id] = true;
  }
  for (int64_t id = 0; id < size; ++id)
    if (!seen[id]) file.fail("model.vocab", str("has no token with id ", id, "; ids must be 0..", size - 1, " without gaps"));

  const json& merges = file.at(model, "model", "merges");
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) file.fail(str("model.merges[", i, "]"), str("is \"", s, "\"; expected \"left right\""));
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      file.fail(str("model.merges[", i, "]"), str("is ", m.dump(), "; expected \"left right\" or [left, right]"));
    }
    const auto ia = key_to_id.find(a), ib = key_to_id.find(b);
    if (ia == key_to_id.end() || ib == key_to_id.end())
      file.fail(str("model.merges[", i, "]"), str("joins \"", a, "\" and \"", b, "\", which are not both in model.vocab"));
    parts.merges.emplace_back(ia->second, ib->second);
  }
  return parts;
}

// Writes text to path through a temporary file beside it, fsync and rename.
void write_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path temporary = path.string() + ".tmp." + std::to_string(::getpid());
  const auto fail = [&](const std::string& what) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error(str("cannot write tokenizer '", path.string(), "': ", what,
                    "; check that the directory exists and is writable"));
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(str("cannot create '", temporary.string(), "'"));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  const bool synced = written == text.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) fail("write failed (disk full?)");
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) fail(str("rename failed: ", ec.message()));
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& tokenizer_json) {
  const JsonFile file{tokenizer_json.string()};
  std::ifstream in(tokenizer_json);
  if (!in) throw Error(str("cannot open tokenizer '", file.path, "'; check the path, or train one with `dtrain tokenizer train`"));
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(str("tokenizer '", file.path, "' is not valid JSON: ", e.what()));
  }
  try {
    return Tokenizer(read_parts(file, root), file.path);
  } catch (const json::exception& e) {  // a field of the wrong type
    throw Error(str("tokenizer '", file.path, "': unexpected field type: ", e.what()));
  }
}

void Tokenizer::save(const std::filesystem::path& tokenizer_json) const {
  using ojson = nlohmann::ordered_json;
  const auto byte_level = [](bool use_regex) {
    return ojson{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
  };
  ojson pre = byte_level(true);
  if (parts_.pattern != kGpt2Pattern)
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", parts_.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
             byte_level(false)}}};
  std::vector<bool> is_added(parts_.token_bytes.size(), false);
  ojson added = ojson::array();
  for (const AddedToken& t : parts_.added) {
    is_added[t.id] = true;
    added.push_back({{"id", t.id}, {"content", t.content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", t.special}});
  }
  ojson vocab = ojson::object();
  for (size_t id = 0; id < parts_.token_bytes.size(); ++id)
    if (!is_added[id]) vocab[bytes_to_unicode(parts_.token_bytes[id])] = id;
  ojson merges = ojson::array();
  for (const auto& [a, b] : parts_.merges)
    merges.push_back(bytes_to_unicode(parts_.token_bytes[a]) + " " + bytes_to_unicode(parts_.token_bytes[b]));
  const ojson root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre},
      {"post_processor", byte_level(true)},
      {"decoder", byte_level(true)},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", parts_.ignore_merges}, {"vocab", vocab}, {"merges", merges}}}};
  write_atomically(tokenizer_json, root.dump(1) + "\n");
}

}  // namespace dt
