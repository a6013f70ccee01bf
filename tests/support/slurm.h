#pragma once
// A private one-node Slurm cluster for the launcher tests, so that a real
// srun starts the ranks: munged, slurmctld and slurmd from Debian's packages
// (scripts/setup.sh installs them), each with its own configuration, ports,
// key, state and logs in a fresh directory, so that two tests may run
// clusters at once. The daemons run in the foreground as this process's
// children, as root (CI is), and die with it even if it is killed (a
// parent-death signal); the object's end stops them.
//
// skipped(): Slurm is not installed, or this is not root: the caller says
// so and skips. failure(): it is, and the cluster did not come up: the
// caller fails with it (the daemons' logs included).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shell.h"

namespace testing {

class SlurmCluster {
 public:
  SlurmCluster() {
    if (runShell("command -v munged && command -v slurmctld && command -v slurmd && "
                 "command -v srun && command -v sinfo")
            .status != 0) {
      skipped_ = "Slurm is not installed (scripts/setup.sh installs slurmctld, slurmd, "
                 "slurm-client and munge)";
      return;
    }
    if (::geteuid() != 0) {
      skipped_ = "the Slurm daemons run as root here, and this is not root";
      return;
    }
    // Ports are picked, then bound by the daemons: another test may take
    // one between. A start that fails is tried again with other ports.
    for (int attempt = 0; attempt < 3; ++attempt) {
      stop();
      failure_ = start();
      if (failure_.empty()) return;
    }
  }

  ~SlurmCluster() { stop(); }

  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  const std::string& skipped() const { return skipped_; }
  const std::string& failure() const { return failure_; }
  // srun of this cluster: append its arguments.
  std::string srun() const { return "env SLURM_CONF=" + conf_ + " srun"; }
  // The daemons' logs, for a failure's message.
  std::string logs() const {
    if (dir_.empty()) return "";
    return runShell("tail -n 20 " + dir_ + "/slurmctld.log " + dir_ + "/slurmd.log " + dir_ +
                    "/munged.log")
        .output;
  }

 private:
  std::string start() {
    char dir[] = "/tmp/actorpipe-slurm-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return "no temporary directory";
    dir_ = dir;
    conf_ = dir_ + "/slurm.conf";
    // The node as slurmd sees it (sockets, cores, threads, the CPUs this
    // process may use), so that slurmctld never drains it for a mismatch.
    auto probe = runShell("slurmd -C");
    std::string node = probe.output.substr(0, probe.output.find('\n'));
    if (probe.status != 0 || node.rfind("NodeName=", 0) != 0) return "slurmd -C: " + probe.output;
    auto memory = node.find(" RealMemory=");
    if (memory != std::string::npos) node = node.substr(0, memory);
    std::string name = node.substr(9, node.find(' ') - 9);
    auto setup = runShell("cd " + dir_ + " && chmod 0755 . && mkdir state spool && "
                          "head -c 1024 /dev/urandom > munge.key && chmod 0400 munge.key");
    if (setup.status != 0) return "setting up " + dir_ + ": " + setup.output;
    int ctldPort = freePort(), slurmdPort = freePort();
    if (ctldPort == 0 || slurmdPort == 0 || ctldPort == slurmdPort) return "no free ports";
    std::ofstream conf(conf_);
    conf << "ClusterName=actorpipe\n"
         << "SlurmctldHost=" << name << "(127.0.0.1)\n"
         << "SlurmctldPort=" << ctldPort << "\nSlurmdPort=" << slurmdPort << "\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << dir_ << "/munge.socket\n"
         << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_ << "/spool\n"
         << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\nSlurmdPidFile=" << dir_
         << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\nSlurmdLogFile=" << dir_
         << "/slurmd.log\n"
         // No cgroups: containers often lack them, and nothing here needs them.
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "MpiDefault=none\nSwitchType=switch/none\nSchedulerType=sched/builtin\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\n"
         << node << " NodeAddr=127.0.0.1 State=UNKNOWN\n"
         << "PartitionName=test Nodes=" << name
         << " Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n";
    conf.close();
    // Its own munge key: the cluster trusts nothing of the host's.
    spawn({"munged", "--foreground", "--force", "--socket=" + dir_ + "/munge.socket",
           "--key-file=" + dir_ + "/munge.key", "--pid-file=" + dir_ + "/munged.pid",
           "--log-file=" + dir_ + "/munged.log", "--seed-file=" + dir_ + "/munge.seed"},
          "munged.out");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (::access((dir_ + "/munge.socket").c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline) return "munged never started" + outputs();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    spawn({"slurmctld", "-D", "-f", conf_}, "slurmctld.out");
    spawn({"slurmd", "-D", "-f", conf_}, "slurmd.out");
    // slurmd registers with slurmctld, which then calls the node idle.
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (runShell("SLURM_CONF=" + conf_ + " sinfo -h -o %t").output.find("idle") ==
           std::string::npos) {
      for (pid_t pid : pids_) {
        if (::waitpid(pid, nullptr, WNOHANG) == pid) return "a Slurm daemon exited" + outputs();
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return "the Slurm node never became idle" + outputs();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "";
  }

  // Runs `argv` as a child that dies with this process; its output goes to
  // `output` in the cluster's directory.
  void spawn(const std::vector<std::string>& argv, const std::string& output) {
    // Everything the child needs is made before fork: other threads of
    // this process may hold the allocator's lock.
    std::string path = dir_ + "/" + output;
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the parent is gone already
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    if (pid > 0) pids_.push_back(pid);
  }

  std::string outputs() const {
    return "\n" +
           runShell("cd " + dir_ + " && tail -n 20 *.out *.log 2>/dev/null").output;
  }

  // slurmd first (it ends its steps' tasks), munged last; each is killed
  // if it has not ended within 5 s.
  void stop() {
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
      ::kill(*it, SIGTERM);
      bool ended = false;
      for (int i = 0; i < 250 && !ended; ++i) {
        ended = ::waitpid(*it, nullptr, WNOHANG) == *it;
        if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!ended) {
        ::kill(*it, SIGKILL);
        ::waitpid(*it, nullptr, 0);
      }
    }
    pids_.clear();
    if (!dir_.empty()) runShell("rm -rf " + dir_);
    dir_.clear();
  }

  // A port below the kernel's ephemeral range (32768 up), so that no
  // outgoing connection of a test running beside this one takes it.
  static int freePort() {
    static std::mt19937 random(static_cast<unsigned>(::getpid()) ^
                               static_cast<unsigned>(std::random_device{}()));
    for (int tries = 0; tries < 100; ++tries) {
      int port = 20000 + static_cast<int>(random() % 12000);
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(static_cast<uint16_t>(port));
      bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
      ::close(fd);
      if (free) return port;
    }
    return 0;
  }

  std::string skipped_;
  std::string failure_;
  std::string dir_;
  std::string conf_;
  std::vector<pid_t> pids_;  // munged, slurmctld, slurmd
};

} // namespace testing
