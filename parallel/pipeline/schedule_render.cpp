#include "parallel/pipeline/schedule_render.h"

#include <cmath>

#include "core/error.h"

namespace dt::pipeline {

namespace {

// The letter of a compute action (F, B, I, W), in lower case for a rank's odd chunks.
char letter(const Schedule& s, const Action& a) {
  const bool odd_chunk = (a.stage / s.ranks) % 2 == 1;
  const char c = a.op == Op::forward ? 'F' : a.op == Op::backward ? 'B' : a.op == Op::backward_input ? 'I' : 'W';
  return odd_chunk ? static_cast<char>(c - 'A' + 'a') : c;
}

const char* colour(Op op) {
  switch (op) {
    case Op::forward: return "#4e79a7";
    case Op::backward: return "#59a14f";
    case Op::backward_input: return "#f28e2b";
    default: return "#b07aa1";
  }
}

}  // namespace

double theoretical_bubble(const Schedule& s) {
  const double idle = s.ranks - 1, m = s.micro_batches;
  if (s.name == "interleaved") return idle / (s.virtual_stages * m);
  if (s.name == "zb-h1") return idle / (3 * m);
  if (s.name == "zb-v") return idle / (6 * m);
  return idle / m;
}

std::string timeline_text(const Schedule& s, const ScheduleCheck& check) {
  const auto units = static_cast<size_t>(std::lround(check.makespan));
  std::string out;
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<std::string> cells(units, " . ");
    for (const ScheduleCheck::Timed& t : check.timeline[r]) {
      std::string cell = str(letter(s, t.action), t.action.micro_batch);
      cell.resize(3, ' ');
      for (auto u = static_cast<size_t>(std::lround(t.start)); u < static_cast<size_t>(std::lround(t.end)); ++u)
        cells[u] = cell;
    }
    out += str("rank ", r, " |");
    for (const std::string& c : cells) out += c;
    out += "|\n";
  }
  return out;
}

std::string timeline_svg(const Schedule& s, const ScheduleCheck& check) {
  constexpr int kUnit = 26, kRow = 30, kLeft = 70, kTop = 40;
  const int width = kLeft + static_cast<int>(std::lround(check.makespan)) * kUnit + 20;
  const int height = kTop + s.ranks * kRow + 20;
  std::string out = str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", height,
                        "\" font-family=\"monospace\" font-size=\"11\">\n",
                        "<text x=\"4\" y=\"18\" font-size=\"13\">", s.name, ": ", s.ranks, " ranks, ", s.micro_batches,
                        " micro-batches", s.virtual_stages > 1 ? str(", ", s.virtual_stages, " virtual stages") : "",
                        "; bubble ", check.bubble(), " (theory ", theoretical_bubble(s), ")</text>\n");
  for (int r = 0; r < s.ranks; ++r) {
    const int y = kTop + r * kRow;
    out += str("<text x=\"4\" y=\"", y + 18, "\">rank ", r, "</text>\n");
    for (const ScheduleCheck::Timed& t : check.timeline[r]) {
      const int x = kLeft + static_cast<int>(std::lround(t.start * kUnit));
      const int w = static_cast<int>(std::lround((t.end - t.start) * kUnit));
      out += str("<rect x=\"", x, "\" y=\"", y, "\" width=\"", w - 1, "\" height=\"", kRow - 4, "\" fill=\"",
                 colour(t.action.op), "\"/><text x=\"", x + 3, "\" y=\"", y + 17, "\" fill=\"white\">",
                 letter(s, t.action), t.action.micro_batch, "</text>\n");
    }
  }
  return out + "</svg>\n";
}

}  // namespace dt::pipeline
