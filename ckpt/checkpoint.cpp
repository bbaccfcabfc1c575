#include "ckpt/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/buffer.h"
#include "core/checksum.h"
#include "core/error.h"
#include "core/fault_injection.h"

namespace dt::ckpt {

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kTensors = "tensors.safetensors";
constexpr const char* kLatest = "latest";

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%09lld", static_cast<long long>(step));
  return name;
}

void fsync_path(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw Error(str("cannot sync '", path.string(), "': ", reason));
  }
  ::close(fd);
}

// Writes `text` to `path` through a temporary file, fsync and rename.
void write_file_durably(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error(str("cannot write '", temporary.string(), "': ", std::strerror(errno), " (is the disk full?)"));
  }
  fsync_path(temporary, O_RDONLY);
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw Error(str("cannot write '", path.string(), "': rename failed"));
  }
}

// Whether `name` is a step directory's: step_ and nine digits, no suffix (not a save's ".tmp",
// not a removal's ".old").
bool is_step_name(const std::string& name) {
  return name.size() == 14 && name.starts_with("step_") &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Removes step directory `step`: first renamed (atomically, durably) out of the step
// directories' names, so that a crash during the removal leaves no checkpoint with files missing;
// then deleted. A removal a crash left (".old") is finished by the next.
void remove_step_directory(const std::filesystem::path& root, const std::filesystem::path& step) {
  std::error_code ec;
  const std::filesystem::path old = step.string() + ".old";
  std::filesystem::rename(step, old, ec);
  if (ec) return;  // kept, whole: it is removed at a later save
  fsync_path(root, O_RDONLY | O_DIRECTORY);
  std::filesystem::remove_all(old, ec);
}

uint32_t checksum_of(const Tensor& t) { return crc32c(t.data, t.bytes()); }

}  // namespace

std::vector<std::filesystem::path> step_directories(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> steps;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec))
    if (entry.is_directory() && is_step_name(entry.path().filename().string())) steps.push_back(entry.path());
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string shard_file_name(int rank, int ranks) {
  if (ranks == 1) return kTensors;
  char name[64];
  std::snprintf(name, sizeof name, "tensors_%05d_of_%05d.safetensors", rank, ranks);
  return name;
}

std::filesystem::path temporary_directory(const std::filesystem::path& root, int64_t step) {
  return root / (step_name(step) + ".tmp");
}

void begin_checkpoint(const std::filesystem::path& root, int64_t step) {
  with_context(str("saving checkpoint of step ", step, " under '", root.string(), "'"), [&] {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);
    if (ec) throw Error(str("cannot create the checkpoint directory: ", ec.message()));
    const std::filesystem::path temporary = temporary_directory(root, step);
    std::filesystem::remove_all(temporary, ec);  // left by a crash during an earlier save
    if (!std::filesystem::create_directory(temporary, ec) || ec)
      throw Error(str("cannot create '", temporary.string(), "': ", ec ? ec.message() : "it exists"));
  });
}

void write_checkpoint_file(const std::filesystem::path& root, int64_t step, const std::string& file,
                           const std::vector<std::pair<std::string, Tensor>>& tensors) {
  with_context(str("saving checkpoint of step ", step, " under '", root.string(), "'"), [&] {
    if (fault_injected("checkpoint-write-slow", step)) std::this_thread::sleep_for(std::chrono::seconds(2));
    SafetensorsWriter writer;
    for (const auto& [name, tensor] : tensors) {
      writer.add(name, tensor);
      writer.set_metadata("crc32c." + name, std::to_string(checksum_of(tensor)));
    }
    writer.write(temporary_directory(root, step) / file);
  });
}

std::filesystem::path finish_checkpoint(const std::filesystem::path& root, const CheckpointContent& content,
                                        const std::vector<std::string>& files, int keep_last) {
  DT_CHECK(keep_last >= 1, "keep_last = ", keep_last);
  return with_context(str("saving checkpoint of step ", content.step, " under '", root.string(), "'"), [&] {
    const std::string name = step_name(content.step);
    const std::filesystem::path final_dir = root / name, temporary = temporary_directory(root, content.step);
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const std::string& file : files) {
      if (!std::filesystem::exists(temporary / file))
        throw Error(str("'", (temporary / file).string(), "' was not written; every process must write its file ",
                        "before the checkpoint is finished"));
      const SafetensorsReader reader(temporary / file);
      for (const std::string& tensor_name : reader.names()) {
        const StoredTensorInfo& info = reader.info(tensor_name);
        tensors.push_back({{"name", tensor_name},
                           {"dtype", dtype_name(info.dtype)},
                           {"shape", std::vector<int64_t>(info.shape.begin(), info.shape.end())},
                           {"file", file},
                           {"crc32c", std::stoul(reader.metadata().at("crc32c." + tensor_name))}});
      }
    }
    if (fault_injected("checkpoint-write-fails", content.step))
      throw Error(str("cannot write '", (temporary / kManifest).string(),
                      "': No space left on device (injected by DTRAIN_INJECT_FAULT)"));
    if (fault_injected("checkpoint-write-stalls", content.step)) std::this_thread::sleep_for(std::chrono::minutes(1));
    const nlohmann::ordered_json manifest = {{"format_version", kCheckpointFormatVersion},
                                             {"step", content.step},
                                             {"model", content.model},
                                             {"state", content.state},
                                             {"tensors", tensors}};
    write_file_durably(temporary / kManifest, manifest.dump(2) + "\n");
    fsync_path(temporary, O_RDONLY | O_DIRECTORY);

    std::error_code ec;
    std::filesystem::remove_all(final_dir, ec);  // the same step saved again
    std::filesystem::rename(temporary, final_dir, ec);
    if (ec) throw Error(str("cannot rename '", temporary.string(), "' into place: ", ec.message()));
    fsync_path(root, O_RDONLY | O_DIRECTORY);
    // Only now does the new checkpoint become the one a resume finds.
    write_file_durably(root / kLatest, name + "\n");
    fsync_path(root, O_RDONLY | O_DIRECTORY);

    for (const auto& entry : std::filesystem::directory_iterator(root, ec))
      if (entry.path().extension() == ".old") std::filesystem::remove_all(entry.path(), ec);
    std::vector<std::filesystem::path> steps = step_directories(root);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < steps.size(); ++i)
      if (steps[i] != final_dir) remove_step_directory(root, steps[i]);
    return final_dir;
  });
}

std::filesystem::path save_checkpoint(const std::filesystem::path& root, const CheckpointContent& content,
                                      int keep_last) {
  begin_checkpoint(root, content.step);
  write_checkpoint_file(root, content.step, kTensors, content.tensors);
  return finish_checkpoint(root, content, {kTensors}, keep_last);
}

std::filesystem::path Checkpoint::latest(const std::filesystem::path& root) {
  std::ifstream in(root / kLatest);
  std::string name;
  if (!(in >> name))
    throw Error(str("no checkpoint under '", root.string(), "' (no readable '", kLatest,
                    "' file); start without resuming, or point to the run's checkpoint directory"));
  if (!std::filesystem::is_directory(root / name))
    throw Error(str("'", (root / kLatest).string(), "' names '", name, "', which does not exist under '",
                    root.string(), "'; the directory was edited by hand"));
  return root / name;
}

std::filesystem::path Checkpoint::step_or_latest(const std::filesystem::path& directory) {
  return std::filesystem::exists(directory / kManifest) ? directory : latest(directory);
}

Checkpoint::Checkpoint(std::filesystem::path directory) : directory_(std::move(directory)) {
  const std::filesystem::path path = directory_ / kManifest;
  std::ifstream in(path);
  if (!in) throw Error(str("checkpoint manifest '", path.string(), "' cannot be read: ", std::strerror(errno)));
  try {
    manifest_ = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("checkpoint manifest '", path.string(), "' is not valid JSON: ", e.what()));
  }
  for (const char* key : {"format_version", "step", "model", "state", "tensors"})
    if (!manifest_.contains(key)) throw Error(str("checkpoint manifest '", path.string(), "' has no '", key, "'"));
  if (manifest_["format_version"] != kCheckpointFormatVersion)
    throw Error(str("checkpoint manifest '", path.string(), "' has format_version ", manifest_["format_version"].dump(),
                    "; this dtrain reads version ", kCheckpointFormatVersion));
  // Every file the manifest names must be there before anything is read: a checkpoint saved by
  // several processes is usable only whole.
  std::map<std::string, int> tensors_in;
  for (const auto& t : manifest_.at("tensors")) ++tensors_in[t.at("file").get<std::string>()];
  std::string missing;
  for (const auto& [file, count] : tensors_in)
    if (!std::filesystem::exists(directory_ / file))
      missing += str("\n  ", file, " (", count, " tensor", count == 1 ? "" : "s", ")");
  if (!missing.empty())
    throw Error(str("checkpoint '", directory_.string(), "' is incomplete: its manifest names ", tensors_in.size(),
                    " tensor files and these are missing:", missing,
                    "\na checkpoint saved by several ranks needs every rank's file; copy the whole step directory. ",
                    previous_advice()));
  for (const auto& [file, count] : tensors_in) files_.emplace(file, SafetensorsReader(directory_ / file));
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& t : manifest_.at("tensors")) names.push_back(t.at("name").get<std::string>());
  return names;
}

std::string Checkpoint::previous_advice() const {
  std::string previous;
  for (const auto& step : step_directories(directory_.parent_path()))
    if (step < directory_) previous = step.string();
  return previous.empty() ? std::string("No earlier checkpoint is kept; restart the run")
                          : str("Resume from the previous checkpoint '", previous, "'");
}

void Checkpoint::checksum_failed(const std::string& name, uint32_t stored, uint32_t computed) const {
  throw Error(str("checkpoint '", directory_.string(), "': tensor '", name, "' fails its checksum (stored ", stored,
                  ", computed ", computed, "): the file is corrupt. ", previous_advice()));
}

const nlohmann::json& Checkpoint::entry(const std::string& name) const {
  const auto& entries = manifest_.at("tensors");
  const auto found = std::find_if(entries.begin(), entries.end(), [&](const auto& t) { return t.at("name") == name; });
  if (found == entries.end())
    throw Error(str("checkpoint '", directory_.string(), "' has no tensor '", name,
                    "'; it was saved by a different model or configuration"));
  return *found;
}

void Checkpoint::read_into(const std::string& name, const Tensor& destination) const {
  const nlohmann::json& e = entry(name);
  files_.at(e.at("file").get<std::string>()).read_into(name, destination);
  const uint32_t computed = checksum_of(destination), stored = e.at("crc32c").get<uint32_t>();
  if (computed != stored) checksum_failed(name, stored, computed);
}

void Checkpoint::verify() const {
  for (const std::string& name : tensor_names()) {
    const nlohmann::json& e = entry(name);
    const LoadedTensor t = files_.at(e.at("file").get<std::string>()).read(name, MemTag::workspace);
    if (const uint32_t computed = checksum_of(t.tensor), stored = e.at("crc32c").get<uint32_t>(); computed != stored)
      checksum_failed(name, stored, computed);
  }
}

}  // namespace dt::ckpt
