#include "train/checkpoint_saver.h"

#include "ckpt/checkpoint.h"
#include "core/error.h"

namespace dt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The device the share's values live on (the CPU for an empty share).
Device share_device(const CheckpointShare& share) {
  Device device = Device::cpu;
  share.for_each_value([&](const Tensor& t) { device = t.device; });
  return device;
}

}  // namespace

CheckpointSaver::CheckpointSaver(std::filesystem::path root, int keep_last, bool async, Communicator& control,
                                 const ParameterLayout& layout, CheckpointShare share, OnSaved on_saved)
    : root_(std::move(root)),
      keep_last_(keep_last),
      async_(async),
      control_(control),
      layout_(layout),
      share_(std::move(share)),
      on_saved_(std::move(on_saved)) {
  if (!async_) return;
  // Zeroed now, so that the first save does not pay for faulting its pages in.
  staging_ = Buffer(checkpoint_share_bytes(share_), MemTag::checkpoint, Device::cpu);
  pinning_.emplace(staging_.data(), staging_.bytes(), share_device(share_));
  size_t offset = 0;
  const CheckpointShare staged = share_copy(share_, [&](const Tensor& t) {
    const Tensor view = staging_.view(t.dtype, t.shape, offset);
    offset += t.bytes();
    copies_.emplace_back(t, view);
    return view;
  });
  staged_tensors_ = checkpoint_tensors(layout_, staged);
  files_ = checkpoint_files(control_, !staged_tensors_.empty());
}

CheckpointSaver::~CheckpointSaver() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointSaver::start(std::function<void()> work) {
  done_ = false;
  error_ = nullptr;
  thread_ = std::thread([this, work = std::move(work)] {
    try {
      work();
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
  });
}

void CheckpointSaver::join() {
  if (thread_.joinable()) thread_.join();  // a poll may have joined it while others still wrote
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void CheckpointSaver::save(const AdamW& optimizer, const LossScaler* scaler, const TrainingProgress& progress) {
  const auto called = std::chrono::steady_clock::now();
  wait();
  if (!async_) {
    const std::filesystem::path directory = save_training_checkpoint(root_, keep_last_, control_, layout_, share_,
                                                                     optimizer, scaler, progress);
    const double seconds = seconds_since(called);
    if (control_.rank() == 0) on_saved_({progress.step, directory, seconds, seconds});
    return;
  }
  content_ = checkpoint_content(layout_, optimizer, scaler, progress);
  if (control_.rank() == 0) ckpt::begin_checkpoint(root_, progress.step);
  control_.barrier().wait();
  // The snapshot: once the values are staged, the next step may change them.
  for (const auto& [from, to] : copies_) copy_bytes(to.data, Device::cpu, from.data, from.device, from.bytes());
  started_ = called;
  stall_s_ = seconds_since(called);
  phase_ = Phase::writing;
  start([this, step = progress.step] {
    if (!files_.own.empty()) ckpt::write_checkpoint_file(root_, step, files_.own, staged_tensors_);
  });
}

void CheckpointSaver::start_finishing() {
  if (control_.rank() != 0) {
    phase_ = Phase::idle;
    return;
  }
  phase_ = Phase::finishing;
  start([this] {
    directory_ = ckpt::finish_checkpoint(root_, content_, files_.all, keep_last_);
    save_s_ = seconds_since(started_);
  });
}

void CheckpointSaver::completed() {
  phase_ = Phase::idle;
  on_saved_({content_.step, directory_, stall_s_, save_s_});
}

void CheckpointSaver::poll() {
  if (phase_ == Phase::writing) {
    const bool written = done_;
    if (written) join();  // a failed write stops its rank here
    if (all_reduce_value(control_, written ? 0 : 1, ReduceOp::max) != 0) return;  // a rank still writes
    start_finishing();
  } else if (phase_ == Phase::finishing && done_) {
    join();
    completed();
  }
}

void CheckpointSaver::wait() {
  if (phase_ == Phase::writing) {
    join();
    // The slowest rank's write is waited for untimed: a large write is not a hang.
    control_.barrier(/*timed=*/false).wait();
    start_finishing();
  }
  if (phase_ == Phase::finishing) {
    join();
    completed();
  }
}

}  // namespace dt
