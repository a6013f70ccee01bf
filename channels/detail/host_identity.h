#pragma once
// The parts of a same-host channel's domain: which boot, which user, which
// namespaces. Two processes whose domains are equal can reach each other's
// processes by pid (cma, cuda_ipc's acknowledgement page).
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace actorpipe::channel::detail {

inline std::string nsInode(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? std::to_string(st.st_ino) : "?";
}

inline std::string readFirstWord(const char* path) {
  std::string word;
  std::ifstream(path) >> word;
  return word;
}

// "<channel>/boot:<id>/uid:<uid>/userns:<inode>/pidns:<inode>"
inline std::string sameHostDomain(const std::string& channel) {
  return channel + "/boot:" + readFirstWord("/proc/sys/kernel/random/boot_id") + "/uid:" +
         std::to_string(::geteuid()) + "/userns:" + nsInode("/proc/self/ns/user") + "/pidns:" +
         nsInode("/proc/self/ns/pid");
}

} // namespace actorpipe::channel::detail
