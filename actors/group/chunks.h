#pragma once
// How one collective call's tensors are cut into messages: each chunk is one
// message, holding slices of one or more tensors (small tensors share a
// message; large ones span several). Every rank cuts the same way.
#include <cstddef>
#include <vector>

#include <actorpipe/actors/group/tensor.h>

namespace actorpipe::group {

struct Segment {
  int tensor{0};
  size_t offset{0};  // bytes into that tensor
  size_t length{0};  // bytes
  size_t packed{0};  // offset in all tensors laid end to end (scratch buffers)
};

struct Chunk {
  std::vector<Segment> segments;
  size_t bytes{0};
};

// Always at least one chunk (possibly empty), so that even a call without
// data makes one trip up and down the tree (a barrier).
std::vector<Chunk> cutIntoChunks(const std::vector<TensorView>& tensors, size_t chunkBytes);

// The chunk size used when the caller does not set one.
size_t defaultChunkBytes(size_t totalBytes);
// Bytes a scratch buffer needs for all of the chunks' segments (alignment included).
size_t packedExtent(const std::vector<Chunk>& chunks);

} // namespace actorpipe::group
