#include "comm/mpi_progress.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "core/trace.h"

namespace dt {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(str(call, " failed: ", std::string(text, static_cast<size_t>(length))));
}

void MpiOpState::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool MpiOpState::done() {
  std::lock_guard lock(mutex_);
  return done_;
}

void MpiOpState::complete(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

namespace {
std::atomic<bool> progress_started{false};
}  // namespace

MpiProgress& MpiProgress::instance() {
  static MpiProgress progress;
  progress_started = true;
  return progress;
}

bool MpiProgress::started() { return progress_started; }

MpiProgress::MpiProgress() {
  // MPI is initialized on the thread that will make every MPI call; the constructor waits for it.
  std::future<void> initialized = initialized_.get_future();
  thread_ = std::thread([this] { loop(); });
  initialized.wait();
  if (init_error_) {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    std::rethrow_exception(init_error_);
  }
}

MpiProgress::~MpiProgress() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<MpiOpState> MpiProgress::submit(Op op) {
  auto state = std::make_shared<MpiOpState>();
  {
    std::lock_guard lock(mutex_);
    if (init_error_) std::rethrow_exception(init_error_);
    queue_.emplace_back(std::move(op), state);
  }
  wake_.notify_one();
  return state;
}

void MpiProgress::run(std::function<void()> fn) {
  submit({.start = [fn = std::move(fn)] { fn(); return MPI_REQUEST_NULL; }, .finish = [] {}, .collective = {}, .members = {},
          .completed = {}})
      ->wait();
}

void MpiProgress::fail_watched(const CollectiveInfo& collective, std::exception_ptr error) {
  // Nobody waits on a watched collective's state on the host (a GPU stream does): its failure
  // ends the job here, so that no other rank is left waiting in it.
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain: %s: %s failed: %s\n", who(world_rank_).c_str(), collective.describe().c_str(),
                 e.what());
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; the compiler is not told so
}

void MpiProgress::loop() {
  try {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error("the MPI library does not support MPI_THREAD_SERIALIZED; dtrain calls MPI from one thread "
                  "that is not the main thread and needs it");
    // Errors come back as codes (turned into dt::Error with the call), not as an abort.
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    library_ = std::string(version, static_cast<size_t>(length));
    if (const size_t end = library_.find_first_of(",\n"); end != std::string::npos) library_.resize(end);
    watchdog_ = std::make_unique<MpiWatchdog>(MPI_COMM_WORLD, world_rank_, world_size_);
  } catch (...) {
    std::lock_guard lock(mutex_);
    init_error_ = std::current_exception();
  }
  initialized_.set_value();

  std::vector<Active> active;
  while (true) {
    std::deque<std::pair<Op, std::shared_ptr<MpiOpState>>> starting;
    {
      std::unique_lock lock(mutex_);
      // Idle, the thread still wakes every 10 ms: the watchdog answers other ranks' questions.
      if (active.empty()) wake_.wait_for(lock, std::chrono::milliseconds(10), [this] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty() && active.empty()) break;
      starting.swap(queue_);
    }
    for (auto& [op, state] : starting) {
      if (init_error_) {
        state->complete(init_error_);
        continue;
      }
      try {
        const auto started = std::chrono::steady_clock::now();
        const MPI_Request request = op.completed ? MPI_REQUEST_NULL : op.start();
        active.push_back({request, std::move(op.completed), std::move(op.finish), state, op.collective, started,
                          std::move(op.start)});
        if (op.collective) watchdog_->started(*op.collective, op.members);
      } catch (...) {
        state->complete(std::current_exception());
      }
    }
    bool progressed = !starting.empty();
    for (size_t i = 0; i < active.size();) {
      int finished = 0;
      std::exception_ptr error;
      try {
        if (active[i].completed)
          finished = active[i].completed();
        else
          check_mpi(MPI_Test(&active[i].request, &finished, MPI_STATUS_IGNORE), "MPI_Test");
        if (finished) active[i].finish();
      } catch (...) {
        finished = 1;
        error = std::current_exception();
      }
      if (!finished) {
        ++i;
        continue;
      }
      if (error && active[i].completed) fail_watched(*active[i].collective, error);
      if (active[i].collective) {
        watchdog_->finished(*active[i].collective);
        // A watched collective is seen here only from its enqueueing to the next test after
        // it ended on the GPU: no span for the trace, whose overlap figures would take it for
        // communication time.
        if (!active[i].completed)
          trace::record(trace::Track::communication, active[i].collective->describe(), active[i].started,
                        std::chrono::steady_clock::now());
      }
      active[i].state->complete(error);
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      progressed = true;
    }
    if (watchdog_) watchdog_->poll();
    // MPI advances a nonblocking collective only inside MPI calls, so while one is in flight the
    // thread tests it again at once, yielding the core between tests to threads that compute
    // (a sleep between tests halved the bandwidth of large all-reduces: each step of the ring
    // waited for the next test).
    // Watched collectives alone need no MPI call to advance: a test a millisecond is enough.
    const bool only_watched = !active.empty() && std::all_of(active.begin(), active.end(), [](const Active& a) {
      return static_cast<bool>(a.completed);
    });
    if (progressed) continue;
    if (!only_watched) {
      std::this_thread::yield();
    } else {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(1), [this] { return stop_ || !queue_.empty(); });
    }
  }
  watchdog_.reset();
  if (!init_error_) MPI_Finalize();
}

}  // namespace dt
