// A three-stage model-parallel pipeline: each stage is an actor owning one
// layer's weights; batches of activations (tensors) flow through channels
// from stage to stage. Closing the input shuts the pipeline down stage by
// stage. The result is checked against the same layers applied in order.

#include <actorpipe/actors/dataflow/dag.h>
#include <actorpipe/actors/tensor.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

using actorpipe::DType;
using actorpipe::Tensor;
using namespace actorpipe::dataflow;

namespace {

constexpr std::int64_t batchRows = 16;
constexpr std::int64_t width = 64;

struct Batch {
  int id;
  Tensor activations; // [batchRows, width] float32
};

// y = relu(x W + b), with W [width, width] and b [width].
class Layer {
public:
  explicit Layer(int seed)
    : weights_(Tensor::empty({width, width}, DType::kFloat32)),
      bias_(Tensor::empty({width}, DType::kFloat32)) {
    auto* w = weights_.data<float>();
    for (std::int64_t i = 0; i < width * width; ++i)
      w[i] = std::sin(float(seed * 7919 + i)) / width;
    auto* b = bias_.data<float>();
    for (std::int64_t i = 0; i < width; ++i)
      b[i] = std::cos(float(seed + i)) / 10;
  }

  Tensor forward(const Tensor& input) const {
    auto output = Tensor::empty({batchRows, width}, DType::kFloat32);
    const auto* x = input.data<float>();
    const auto* w = weights_.data<float>();
    const auto* b = bias_.data<float>();
    auto* y = output.data<float>();
    for (std::int64_t r = 0; r < batchRows; ++r)
      for (std::int64_t c = 0; c < width; ++c) {
        float sum = b[c];
        for (std::int64_t k = 0; k < width; ++k)
          sum += x[r * width + k] * w[k * width + c];
        y[r * width + c] = sum > 0 ? sum : 0;
      }
    return output;
  }

private:
  Tensor weights_;
  Tensor bias_;
};

Tensor makeInput(int id) {
  auto t = Tensor::empty({batchRows, width}, DType::kFloat32);
  auto* x = t.data<float>();
  for (std::int64_t i = 0; i < batchRows * width; ++i)
    x[i] = std::sin(float(id * 131 + i));
  return t;
}

bool sameValues(const Tensor& a, const Tensor& b) {
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (a.data<float>()[i] != b.data<float>()[i])
      return false;
  return true;
}

} // namespace

int main() {
  constexpr int batches = 300;
  caf::actor_system_config config;
  caf::actor_system system{config};

  std::vector<Layer> layers{Layer(1), Layer(2), Layer(3)};
  Dag dag(system);
  // Small capacities: a slow stage holds the earlier ones back instead of
  // letting activations pile up.
  Channel<Batch> input(4);
  auto run = [](const Layer& layer) {
    return [&layer](Batch batch) { return Batch{batch.id, layer.forward(batch.activations)}; };
  };
  auto hidden1 = dag.stage(input, run(layers[0]), {1, 4});
  auto hidden2 = dag.stage(hidden1, run(layers[1]), {1, 4});
  auto output = dag.stage(hidden2, run(layers[2]), {1, 4});

  std::thread feeder([&] {
    for (int id = 0; id < batches; ++id)
      input.write(Batch{id, makeInput(id)});
    input.close(); // cascades: every stage ends once its input drains
  });

  int received = 0;
  bool inOrder = true;
  bool correct = true;
  for (auto read = output.read(); read.item; read = output.read()) {
    auto& batch = *read.item;
    inOrder = inOrder && batch.id == received;
    auto expected = layers[2].forward(layers[1].forward(layers[0].forward(makeInput(batch.id))));
    correct = correct && sameValues(batch.activations, expected);
    ++received;
  }
  feeder.join();
  dag.wait();

  bool ok = received == batches && inOrder && correct && dag.running() == 0;
  std::printf("%d batches through 3 stages, order %s, values %s, stages left %zu: %s\n",
              received, inOrder ? "kept" : "BROKEN", correct ? "match" : "DIFFER",
              dag.running(), ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
