// A workqueue of file-loading workers: the owner asks for files by path,
// four workers (started with map) load each into a tensor and answer, and
// the owner checks every tensor against what was written to disk.

#include <actorpipe/actors/dataflow/map.h>
#include <actorpipe/actors/dataflow/workqueue.h>
#include <actorpipe/actors/tensor.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include <unistd.h>

using actorpipe::DType;
using actorpipe::Tensor;
using namespace actorpipe::dataflow;
namespace fs = std::filesystem;

namespace {

constexpr int fileCount = 48;
constexpr std::int64_t valuesPerFile = 4096;

float expected_value(int file, std::int64_t index) {
  return float(file) + float(index) / valuesPerFile;
}

void writeFile(const fs::path& path, int file) {
  std::ofstream out(path, std::ios::binary);
  for (std::int64_t i = 0; i < valuesPerFile; ++i) {
    float value = expected_value(file, i);
    out.write(reinterpret_cast<const char*>(&value), sizeof value);
  }
}

Tensor loadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    throw std::runtime_error("cannot open " + path);
  auto bytes = static_cast<std::int64_t>(in.tellg());
  auto tensor = Tensor::empty({bytes / std::int64_t(sizeof(float))}, DType::kFloat32);
  in.seekg(0);
  in.read(static_cast<char*>(tensor.rawData()), bytes);
  return tensor;
}

} // namespace

int main() {
  auto dir = fs::temp_directory_path() / ("actorpipe-workqueue-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (int f = 0; f < fileCount; ++f)
    writeFile(dir / (std::to_string(f) + ".bin"), f);

  auto queue = WorkQueue<std::string, Tensor>::named("file-loader");
  // Any part of the program can find the queue by name. The workers get it
  // here, before they start: a thread that looked the name up only after
  // close() would get a fresh queue that nobody ever closes.
  auto workers = map(
    4,
    [](WorkQueue<std::string, Tensor> shared, std::size_t) {
      return shared.worker().serve(loadFile);
    },
    WorkQueue<std::string, Tensor>::named("file-loader"));

  for (int f = 0; f < fileCount; ++f)
    queue.write((dir / (std::to_string(f) + ".bin")).string());
  queue.write((dir / "missing.bin").string()); // one error answer expected
  queue.drain();

  int loaded = 0, errors = 0;
  bool correct = true;
  for (int i = 0; i < fileCount + 1; ++i) {
    auto answer = queue.read();
    if (!answer.item) {
      correct = false;
      break;
    }
    if (!answer.item->ok()) {
      ++errors;
      continue;
    }
    auto& tensor = answer.item->get();
    // Answers come in completion order; the data says which file it was.
    int file = int(tensor.data<float>()[0]);
    for (std::int64_t k = 0; k < valuesPerFile && correct; ++k)
      correct = tensor.data<float>()[k] == expected_value(file, k);
    correct = correct && tensor.numel() == valuesPerFile;
    ++loaded;
  }
  queue.close(); // releases the workers
  std::size_t served = 0;
  for (auto count : workers.join())
    served += count;
  fs::remove_all(dir);

  bool ok = correct && loaded == fileCount && errors == 1 && served == fileCount + 1;
  std::printf("%d files loaded by 4 workers (%zu questions served), %d error answer: %s\n",
              loaded, served, errors, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
