#include <cstdio>
#include <fstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_check.h"
#include "parallel/pipeline/schedule_render.h"

namespace dt::cli {

int command_plan_schedule(int argc, char** argv, int first) {
  Args args("plan schedule",
            "a pipeline schedule's per-rank timeline, checked (complete, dependencies, sends and receives, no "
            "deadlock, memory), with its bubble against theory, as text and as an SVG picture");
  args.flag("pp", "4", "pipeline ranks")
      .flag("microbatches", "8", "micro-batches per step")
      .flag("virtual", "1", "virtual stages per rank (interleaved)")
      .flag("schedule", "1f1b", "afab, 1f1b, interleaved, zb-h1 or zb-v")
      .flag("svg", "schedule.svg", "where to write the picture (\"\": nowhere)");
  if (!args.parse(argc, argv, first)) return 0;
  const pipeline::Schedule schedule =
      pipeline::make_schedule(args.get("schedule"), static_cast<int>(args.get_int("pp")),
                              static_cast<int>(args.get_int("microbatches")), static_cast<int>(args.get_int("virtual")));
  const pipeline::ScheduleCheck check = pipeline::check_schedule(schedule);
  if (!check.ok()) throw Error(str("plan schedule: the schedule does not run: ", check.problem));
  std::printf("%s: %d ranks, %d micro-batches, %d virtual stage%s per rank; checked: complete, dependencies "
              "respected, every send matched, no deadlock\n",
              schedule.name.c_str(), schedule.ranks, schedule.micro_batches, schedule.virtual_stages,
              schedule.virtual_stages == 1 ? "" : "s");
  // NCCL's rule is stricter than the checker's (parallel/pipeline/schedule_check.h).
  if (check.nccl_deadlock.empty())
    std::printf("under NCCL (a send waits until its receive runs): runs too\n");
  else
    std::printf("under NCCL (a send waits until its receive runs): %s; a run over NCCL refuses it, "
                "parallel.backend = \"mpi\" runs it\n",
                check.nccl_deadlock.c_str());
  std::printf("bubble (idle over busy, the worst rank; forward, input and weight passes one unit each): %.4f, "
              "theory %.4f\n",
              check.bubble(), pipeline::theoretical_bubble(schedule));
  std::printf("micro-batches held at most, per rank:");
  for (int r = 0; r < schedule.ranks; ++r)
    std::printf(" %d (promised %d)", check.peak_in_flight[r], schedule.promised_in_flight[r]);
  std::printf("\n\n%s", pipeline::timeline_text(schedule, check).c_str());
  const std::string svg = args.get("svg");
  if (!svg.empty()) {
    std::ofstream out(svg);
    out << pipeline::timeline_svg(schedule, check);
    if (!out.flush()) throw Error(str("plan schedule: cannot write ", svg, "; check the directory, or pass --svg \"\""));
    std::printf("\nwrote %s\n", svg.c_str());
  }
  return 0;
}

}  // namespace dt::cli
