#include <actorpipe/actors/group/chunks.h>

#include <algorithm>
#include <cstdlib>

namespace actorpipe::group {

size_t defaultChunkBytes(size_t totalBytes) {
  // Measured on the benchmark machine (docs/benchmarks-groups.md): a message
  // costs tens of microseconds of fixed overhead, so small calls go whole; big
  // ones are cut so that the links and the reduction overlap.
  const size_t whole = size_t{512} << 10;
  if (totalBytes <= whole) return std::max<size_t>(totalBytes, 8);
  return std::clamp<size_t>(totalBytes / 8, size_t{256} << 10, size_t{4} << 20);
}

std::vector<Chunk> cutIntoChunks(const std::vector<TensorView>& tensors, size_t chunkBytes) {
  std::vector<Chunk> chunks;
  Chunk current;
  size_t packed = 0;
  for (int t = 0; t < static_cast<int>(tensors.size()); ++t) {
    // Each tensor starts 16-byte aligned in the scratch buffers, so its
    // elements are aligned there too (the reductions read them as doubles).
    packed = (packed + 15) & ~size_t(15);
    const size_t element = dtypeSize(tensors[t].dtype);
    const size_t bytes = tensors[t].bytes();
    // Slices hold whole elements, so every slice can be reduced on its own.
    const size_t limit = std::max(element, chunkBytes / element * element);
    size_t offset = 0;
    while (offset < bytes) {
      size_t room = limit > current.bytes ? limit - current.bytes : 0;
      room = room / element * element;
      if (room == 0) {
        chunks.push_back(std::move(current));
        current = Chunk{};
        room = limit;
      }
      const size_t take = std::min(bytes - offset, room);
      current.segments.push_back(Segment{t, offset, take, packed});
      current.bytes += take;
      offset += take;
      packed += take;
    }
  }
  if (!current.segments.empty() || chunks.empty()) chunks.push_back(std::move(current));
  return chunks;
}

size_t packedExtent(const std::vector<Chunk>& chunks) {
  size_t end = 0;
  for (const auto& chunk : chunks) {
    for (const auto& segment : chunk.segments) end = std::max(end, segment.packed + segment.length);
  }
  return end;
}

} // namespace actorpipe::group
