// A checked schedule drawn: each rank's compute over time, as text for a terminal and as an
// SVG picture (`dtrain plan schedule`). Times are the checker's units (a forward, an input or a
// weight pass one unit, a whole backward two).
//
// Text: one row per rank, three characters per unit — F (forward), B (a whole backward), I (an
// input pass) or W (a weight pass), then the micro-batch, in lower case for a rank's odd
// virtual stages (interleaved: "f3" is micro-batch 3's forward through the rank's second
// chunk); " . " where the rank waits.
#pragma once

#include <string>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_check.h"

namespace dt::pipeline {

// The bubble theory gives the schedule with unit passes: (p − 1)/m for afab and 1f1b,
// (p − 1)/(v·m) for interleaved, (p − 1)/(3m) for zb-h1, (p − 1)/(6m) for zb-v (only the first
// forwards' wait is left, over two stages' work per rank).
double theoretical_bubble(const Schedule& schedule);

std::string timeline_text(const Schedule& schedule, const ScheduleCheck& check);
std::string timeline_svg(const Schedule& schedule, const ScheduleCheck& check);

}  // namespace dt::pipeline
