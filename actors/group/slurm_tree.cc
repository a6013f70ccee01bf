#include <actorpipe/actors/group/slurm_tree.h>

#include <cstdlib>

#include <actorpipe/actors/group/errors.h>

namespace actorpipe::group {

std::vector<std::string> expandNodeList(const std::string& list) {
  std::vector<std::string> names;
  size_t i = 0;
  while (i < list.size()) {
    // One entry: a prefix, then optionally [ranges], up to a comma outside brackets.
    size_t open = list.find_first_of("[,", i);
    if (open == std::string::npos || list[open] == ',') {
      const size_t end = open == std::string::npos ? list.size() : open;
      if (end > i) names.push_back(list.substr(i, end - i));
      i = end + 1;
      continue;
    }
    const std::string prefix = list.substr(i, open - i);
    const size_t close = list.find(']', open);
    if (close == std::string::npos) {
      names.push_back(list.substr(i));
      break;
    }
    const std::string ranges = list.substr(open + 1, close - open - 1);
    size_t start = 0;
    while (start <= ranges.size()) {
      size_t comma = ranges.find(',', start);
      if (comma == std::string::npos) comma = ranges.size();
      const std::string range = ranges.substr(start, comma - start);
      const size_t dash = range.find('-');
      if (dash == std::string::npos) {
        if (!range.empty()) names.push_back(prefix + range);
      } else {
        const std::string low = range.substr(0, dash);
        const std::string high = range.substr(dash + 1);
        const long from = std::strtol(low.c_str(), nullptr, 10);
        const long to = std::strtol(high.c_str(), nullptr, 10);
        for (long k = from; k <= to && k - from < 100000; ++k) {
          std::string digits = std::to_string(k);
          // Keep zero padding: node[01-03] -> node01.
          while (digits.size() < low.size()) digits = "0" + digits;
          names.push_back(prefix + digits);
        }
      }
      start = comma + 1;
    }
    i = close + 1;
    if (i < list.size() && list[i] == ',') ++i;
  }
  return names;
}

Error SlurmTree::create(const SlurmTreeOptions& options, std::unique_ptr<Tree>& tree,
                        SlurmPlacement& placement) {
  RankInfo info;
  if (Error error = rankInfoFromEnvironment(info)) return error;
  if (info.source != "slurm") {
    return ACTORPIPE_ERROR(RendezvousError, "SlurmTree needs a Slurm job step (SLURM_PROCID is "
                                            "unset; the environment is " + info.source + "'s)");
  }
  if (options.tasksPerGpu < 1) {
    return ACTORPIPE_ERROR(LogicError, "tasksPerGpu must be at least 1");
  }
  const char* nodeName = std::getenv("SLURMD_NODENAME");
  if (nodeName == nullptr || *nodeName == '\0') {
    const char* list = std::getenv("SLURM_STEP_NODELIST");
    if (list == nullptr) list = std::getenv("SLURM_JOB_NODELIST");
    const auto names = expandNodeList(list ? list : "");
    if (info.node >= 0 && info.node < static_cast<int>(names.size()) && !std::getenv("ACTORPIPE_HOST")) {
      info.host = names[info.node];
    }
  }
  placement.node = info.node;
  placement.localRank = info.localRank;
  placement.gpu = info.localRank / options.tasksPerGpu;
  placement.nodeName = info.host;
  TreeOptions treeOptions = options.tree;
  if (treeOptions.secret.empty()) {
    if (Error error = secretFromEnvironment(treeOptions.secret)) return error;
  }
  return Tree::create(info, treeOptions, tree);
}

} // namespace actorpipe::group
