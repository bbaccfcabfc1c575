#include "core/trace.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>

#include "core/error.h"

namespace dt::trace {

namespace {

std::atomic<bool> on{false};
std::mutex mutex;
std::vector<Span> spans;

double micros(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

// The union of [begin, end) intervals, sorted and merged.
std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& [b, e] : intervals) {
    if (!out.empty() && b <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(b, e);
  }
  return out;
}

double length(const std::vector<std::pair<double, double>>& intervals) {
  double total = 0;
  for (const auto& [b, e] : intervals) total += e - b;
  return total;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

void enable(bool enable_recording) { on = enable_recording; }
bool enabled() { return on; }

void record(Track track, std::string name, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end) {
  if (!on) return;
  std::lock_guard lock(mutex);
  spans.push_back({track, std::move(name), micros(begin), micros(end)});
}

std::vector<Span> take() {
  std::lock_guard lock(mutex);
  std::vector<Span> out;
  out.swap(spans);
  return out;
}

ComputeScope::ComputeScope(std::string name) : name_(std::move(name)), begin_(std::chrono::steady_clock::now()) {}
ComputeScope::~ComputeScope() { record(Track::compute, std::move(name_), begin_, std::chrono::steady_clock::now()); }

namespace {

// The parts of the sorted union `a` outside the sorted union `b`.
std::vector<std::pair<double, double>> minus(const std::vector<std::pair<double, double>>& a,
                                             const std::vector<std::pair<double, double>>& b) {
  std::vector<std::pair<double, double>> out;
  size_t j = 0;
  for (auto [begin, end] : a) {
    while (j < b.size() && b[j].second <= begin) ++j;
    for (size_t k = j; k < b.size() && b[k].first < end; ++k) {
      if (b[k].first > begin) out.emplace_back(begin, b[k].first);
      begin = std::max(begin, b[k].second);
    }
    if (begin < end) out.emplace_back(begin, end);
  }
  return out;
}

}  // namespace

Overlap overlap(const std::vector<Span>& all) {
  std::vector<std::pair<double, double>> spans[3];
  for (const Span& s : all) spans[static_cast<int>(s.track)].emplace_back(s.begin_us, s.end_us);
  const auto c = minus(merged(spans[static_cast<int>(Track::compute)]), merged(spans[static_cast<int>(Track::waiting)]));
  const auto m = merged(spans[static_cast<int>(Track::communication)]);
  // The intersection of two sorted unions, by a walk over both.
  double hidden = 0;
  for (size_t i = 0, j = 0; i < c.size() && j < m.size();) {
    hidden += std::max(0.0, std::min(c[i].second, m[j].second) - std::max(c[i].first, m[j].first));
    if (c[i].second < m[j].second)
      ++i;
    else
      ++j;
  }
  return {.compute_ms = length(c) / 1e3, .communication_ms = length(m) / 1e3, .hidden_ms = hidden / 1e3};
}

void append_chrome_events(const std::filesystem::path& part, int rank, const std::vector<Span>& list) {
  std::ofstream out(part, std::ios::app);
  for (const Span& s : list)
    out << str("{\"name\":\"", escaped(s.name), "\",\"ph\":\"X\",\"pid\":", rank, ",\"tid\":",
               static_cast<int>(s.track), ",\"ts\":", static_cast<int64_t>(s.begin_us), ",\"dur\":",
               static_cast<int64_t>(s.end_us - s.begin_us), "}\n");
  if (!out.flush()) throw Error(str("cannot write the trace part ", part.string(), "; check the disk and log.run_dir"));
}

void merge_chrome_trace(const std::filesystem::path& out_path, const std::vector<std::filesystem::path>& parts) {
  std::ofstream out(out_path, std::ios::trunc);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  const auto emit = [&](const std::string& event) {
    out << (first ? "" : ",\n") << event;
    first = false;
  };
  for (size_t rank = 0; rank < parts.size(); ++rank) {
    emit(str("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", rank, ",\"args\":{\"name\":\"rank ", rank, "\"}}"));
    emit(str("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", rank, ",\"tid\":0,\"args\":{\"name\":\"compute\"}}"));
    emit(str("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", rank,
             ",\"tid\":1,\"args\":{\"name\":\"communication\"}}"));
    emit(str("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", rank, ",\"tid\":2,\"args\":{\"name\":\"waiting\"}}"));
    std::ifstream in(parts[rank]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) emit(line);
  }
  out << "\n]}\n";
  if (!out.flush()) throw Error(str("cannot write ", out_path.string(), "; check the disk and log.run_dir"));
}

}  // namespace dt::trace
