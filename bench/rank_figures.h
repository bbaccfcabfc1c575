// What the benchmarks do with their measurements: the median of repeats (this machine is
// noisy), and under mpirun every rank's figure gathered in rank order.
#pragma once

#include <vector>

#include "comm/communicator.h"

namespace dt {

double median(std::vector<double> values);
// Every rank's `value`, in rank order, on every rank (a collective over `world`).
std::vector<double> gathered_from_ranks(Communicator& world, double value);

}  // namespace dt
