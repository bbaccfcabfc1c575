// Tests of several ranks: ctest starts them under mpirun as the Mpi.npN and MpiCuda.npN cases
// (CMakeLists.txt); a direct run without a launcher skips them, saying how they are run.
#pragma once

#include <gtest/gtest.h>

#include "comm/mpi.h"

#define DT_SKIP_WITHOUT_MPIRUN()   \
  if (!::dt::launched_by_mpi())    \
  GTEST_SKIP() << "needs ranks started by mpirun; ctest runs it as Mpi.np2 to Mpi.np4 (MpiCuda.np2 where it needs a GPU)"
