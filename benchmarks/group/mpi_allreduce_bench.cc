// The same measurement as actorpipe-allreduce-bench, with MPI_Allreduce:
//
//   mpirun -n 2 build/benchmarks/group/mpi-allreduce-bench [--sizes ...]
//   (as root: mpirun --allow-run-as-root --oversubscribe -n 4 ...)
#include <mpi.h>

#include <vector>

#include "allreduce_common.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) allreduce_bench::printHeader("OpenMPI MPI_Allreduce", size);
  for (const auto& s : allreduce_bench::parseSizes(argc, argv)) {
    const int count = static_cast<int>(s.bytes / sizeof(float));
    std::vector<float> values(count, 1.0f);
    std::vector<double> microseconds;
    const int warmup = std::max(2, s.iterations / 10);
    for (int i = 0; i < warmup + s.iterations; ++i) {
      const double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, values.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const double end = MPI_Wtime();
      if (i >= warmup) microseconds.push_back((end - start) * 1e6);
    }
    if (rank == 0) allreduce_bench::printRow(s.bytes, microseconds);
  }
  MPI_Finalize();
  return 0;
}
