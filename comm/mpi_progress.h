// The one thread of a process that makes MPI calls.
//
// Collectives are started as MPI's nonblocking operations on this thread and tested there until
// they complete, while the threads that started them go on computing: communication overlapped
// with compute, on CPUs. Only this thread calls MPI — it also initializes and finalizes it — so MPI
// is asked for MPI_THREAD_SERIALIZED, which every MPI library provides.
//
// Operations start in the order they are submitted (the order every rank must keep); several
// may be in flight at once. While some are in flight the thread tests them in a loop, yielding
// the core between tests (MPI advances nonblocking collectives only inside MPI calls); with none
// in flight it sleeps until one is submitted, waking every 10 ms for the watchdog. Collectives
// that other backends run (NCCL's) are watched here too, tested once a millisecond.
//
// Internal to comm/: the layers above see comm/communicator.h.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <optional>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_watchdog.h"

namespace dt {

// Throws dt::Error naming the MPI call and MPI's text for the error code.
void check_mpi(int code, const char* call);

// What a submitter waits on.
class MpiOpState {
 public:
  void wait();  // rethrows the operation's error
  bool done();
  void complete(std::exception_ptr error);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class MpiProgress {
 public:
  // start() runs on the MPI thread and returns the operation's request (MPI_REQUEST_NULL for a
  // blocking call made inside start); finish() runs there once the request has completed.
  // A collective names itself and the world ranks of its group, for the watchdog.
  // completed, when set, stands for a collective that another backend runs (NCCL's, on a GPU
  // stream): start is not called, and instead of testing a request the thread asks completed()
  // about once a millisecond, so that the watchdog covers that collective as its own.
  struct Op {
    std::function<MPI_Request()> start;
    std::function<void()> finish;
    std::optional<CollectiveInfo> collective;
    std::vector<int> members;
    std::function<bool()> completed;
  };

  // The process's MPI thread, started (and MPI initialized) on first use.
  static MpiProgress& instance();
  // Whether instance() has started the thread (and so MPI) in this process.
  static bool started();
  ~MpiProgress();  // finalizes MPI after the operations in flight

  std::shared_ptr<MpiOpState> submit(Op op);
  // Runs fn on the MPI thread after everything submitted before, and waits for it.
  void run(std::function<void()> fn);

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  const std::string& library() const { return library_; }  // "Open MPI v4.1.4, ..."

 private:
  MpiProgress();
  void loop();
  // A watched collective's test failed (NCCL's asynchronous error): prints it and ends the job.
  [[noreturn]] void fail_watched(const CollectiveInfo& collective, std::exception_ptr error);

  struct Active {
    MPI_Request request;
    std::function<bool()> completed;  // a watched collective's test, in place of the request
    std::function<void()> finish;
    std::shared_ptr<MpiOpState> state;
    std::optional<CollectiveInfo> collective;
    std::chrono::steady_clock::time_point started;  // for the trace's communication track
    // Kept until completion: what it captured (host copies MPI reads) must outlive the request.
    std::function<MPI_Request()> start;
  };

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<Op, std::shared_ptr<MpiOpState>>> queue_;
  bool stop_ = false;
  std::promise<void> initialized_;
  std::exception_ptr init_error_;  // set before initialized_, read after it
  int world_rank_ = 0, world_size_ = 1;
  std::string library_;
  std::unique_ptr<MpiWatchdog> watchdog_;  // lives on the MPI thread, between init and finalize
  std::thread thread_;
};

}  // namespace dt
