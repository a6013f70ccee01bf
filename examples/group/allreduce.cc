// Averaging "gradients" across ranks, the way a data-parallel training loop
// would. Start it with the launcher (or srun, mpirun, torchrun):
//
//   actorpipe-run -n 4 build/examples/group/group_allreduce
//
// Every rank prints which links its tree uses and checks that it ends with
// the same averages as everyone else.
#include <cstdio>
#include <vector>

#include <actorpipe/actors/group/tree.h>

using namespace actorpipe::group;

int main() {
  std::unique_ptr<Tree> tree;
  if (auto error = Tree::fromEnvironment(TreeOptions{}, tree)) {
    std::fprintf(stderr, "could not join the group: %s\n", error.what().c_str());
    return 1;
  }
  for (const auto& link : tree->links()) std::printf("rank %d %s\n", tree->rank(), link.c_str());

  // Rank r's gradients are all r + 1: the average is (N + 1) / 2 everywhere.
  std::vector<float> weights(1 << 20, float(tree->rank() + 1));
  std::vector<double> bias(10, double(tree->rank() + 1));
  for (int step = 0; step < 5; ++step) {
    std::fill(weights.begin(), weights.end(), float(tree->rank() + 1));
    std::fill(bias.begin(), bias.end(), double(tree->rank() + 1));
    if (auto error = tree->allReduce({tensorOf(weights), tensorOf(bias)}, Reduction::average())) {
      std::fprintf(stderr, "step %d: %s\n", step, error.what().c_str());
      return 1;
    }
  }
  const double expected = (tree->size() + 1) / 2.0;
  if (weights[12345] != float(expected) || bias[3] != expected) {
    std::fprintf(stderr, "rank %d: got %f and %f, expected %f\n", tree->rank(), weights[12345],
                 bias[3], expected);
    return 1;
  }
  std::printf("rank %d of %d: average %.2f, as everyone\n", tree->rank(), tree->size(), bias[3]);
  return 0;
}
