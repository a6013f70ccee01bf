#pragma once
// A private one-node Slurm cluster for the launcher tests, so that a real
// srun starts the ranks: munged, slurmctld and slurmd from Debian's packages
// (scripts/setup.sh installs them), each with its own configuration, ports,
// socket, state and logs in a fresh directory, so that two tests may run
// clusters at once. Daemons run as root (CI does); the cluster ends with the
// object (a test that crashes leaves its daemons behind: they hold only
// their directory and two loopback ports).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "shell.h"

namespace testing {

class SlurmCluster {
 public:
  SlurmCluster() {
    if (runShell("command -v munged && command -v slurmctld && command -v slurmd && "
                 "command -v srun && command -v sinfo")
            .status != 0) {
      unavailable_ = "Slurm is not installed (scripts/setup.sh installs slurmctld, slurmd, "
                     "slurm-client and munge)";
      return;
    }
    if (::geteuid() != 0) {
      unavailable_ = "the Slurm daemons run as root here, and this is not root";
      return;
    }
    char dir[] = "/tmp/actorpipe-slurm-XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
      unavailable_ = "no temporary directory";
      return;
    }
    dir_ = dir;
    conf_ = dir_ + "/slurm.conf";
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    std::string node(host);
    node = node.substr(0, node.find('.'));
    std::ofstream conf(conf_);
    conf << "ClusterName=actorpipe\n"
         << "SlurmctldHost=" << node << "(127.0.0.1)\n"
         << "SlurmctldPort=" << freePort() << "\n"
         << "SlurmdPort=" << freePort() << "\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << dir_ << "/munge.socket\n"
         << "StateSaveLocation=" << dir_ << "/state\n"
         << "SlurmdSpoolDir=" << dir_ << "/spool\n"
         << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\n"
         << "SlurmdPidFile=" << dir_ << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\n"
         << "SlurmdLogFile=" << dir_ << "/slurmd.log\n"
         // No cgroups: containers often lack them, and nothing here needs them.
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "MpiDefault=none\nSwitchType=switch/none\nSchedulerType=sched/builtin\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\n"
         << "NodeName=" << node << " NodeAddr=127.0.0.1 CPUs=" << ::sysconf(_SC_NPROCESSORS_ONLN)
         << " State=UNKNOWN\n"
         << "PartitionName=test Nodes=" << node
         << " Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE\n";
    conf.close();
    // Its own munge key: the cluster trusts nothing of the host's.
    auto started = runShell(
        "cd " + dir_ + " && chmod 0755 . && mkdir state spool && head -c 1024 /dev/urandom > munge.key && "
        "chmod 0400 munge.key && munged --force -S " + dir_ + "/munge.socket --key-file=" + dir_ +
        "/munge.key --pid-file=" + dir_ + "/munged.pid --log-file=" + dir_ +
        "/munged.log --seed-file=" + dir_ + "/munge.seed && slurmctld -f " + conf_ +
        " && slurmd -f " + conf_);
    if (started.status != 0) {
      unavailable_ = "the Slurm daemons did not start: " + started.output + logs();
      return;
    }
    // slurmd registers with slurmctld, which then calls the node idle.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (runShell("SLURM_CONF=" + conf_ + " sinfo -h -o %t").output.find("idle") ==
           std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) {
        unavailable_ = "the Slurm node never became idle" + logs();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  ~SlurmCluster() {
    if (dir_.empty()) return;
    for (const char* daemon : {"slurmd", "slurmctld", "munged"}) {
      std::ifstream pidFile(dir_ + "/" + daemon + ".pid");
      pid_t pid = 0;
      if (pidFile >> pid && pid > 1) {
        ::kill(pid, SIGTERM);
        for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
    runShell("rm -rf " + dir_);
  }

  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Empty while the cluster runs; otherwise why it does not.
  const std::string& unavailable() const { return unavailable_; }
  // srun of this cluster: append its arguments.
  std::string srun() const { return "env SLURM_CONF=" + conf_ + " srun"; }
  // The daemons' logs, for a failure's message.
  std::string logs() const {
    return runShell("tail -n 20 " + dir_ + "/slurmctld.log " + dir_ + "/slurmd.log " + dir_ +
                    "/munged.log")
        .output;
  }

 private:
  static int freePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port = ntohs(address.sin_port);
    }
    ::close(fd);
    return port;
  }

  std::string unavailable_;
  std::string dir_;
  std::string conf_;
};

} // namespace testing
