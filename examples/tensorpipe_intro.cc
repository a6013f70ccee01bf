// The code of "Introduction to tensorpipe" (the user's seed document), run
// as two processes. Each block between "seed:" markers is the document's
// code unchanged, and so is the include: linked with actorpipe::tensorpipe,
// TensorPipe's header paths are actorpipe's. What lies around the blocks is
// glue: main(), a fork, and the `LOG` macro the document takes from glog.
#include <tensorpipe/tensorpipe.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <future>
#include <iostream>
#include <string>

// glog's LOG(severity), which the document uses.
#define LOG(severity) std::cerr << "[" #severity "] "

using namespace tensorpipe;

namespace {

std::shared_ptr<tensorpipe::Context> makeContext() {
  // seed: "Process of setup communication" (first line)
  auto context = std::make_shared<tensorpipe::Context>();
  // seed: "Register the underlying communication channel"
  // uv is short for libuv, using epoll with sockets to communicate
  auto transportContext = tensorpipe::transport::uv::create();
  context->registerTransport(0 /* priority */, "tcp", transportContext);
  // basic channel just use the bare transport to communicate
  auto basicChannel = tensorpipe::channel::basic::create();
  context->registerChannel(0, "basic", basicChannel);
  // Below is the mpt(multiplex transport) channel, which can use multiple uv transport to increase throughput
  std::vector<std::shared_ptr<tensorpipe::transport::Context>> contexts = {
      tensorpipe::transport::uv::create(), tensorpipe::transport::uv::create(),
      tensorpipe::transport::uv::create()};
  std::vector<std::shared_ptr<tensorpipe::transport::Listener>> listeners = {
      contexts[0]->listen("127.0.0.1"), contexts[1]->listen("127.0.0.1"),
      contexts[2]->listen("127.0.0.1")};
  auto mptChannel = tensorpipe::channel::mpt::create(
      std::move(contexts), std::move(listeners));
  context->registerChannel(10, "mpt", mptChannel);
  // end seed
  return context;
}

int receiver(int urlPipe) {
  auto context = makeContext();
  std::string addr = "tcp://127.0.0.1:0";
  // seed: "For Receiver"
  // Create listener to accept join request
  auto listener = context->listen({addr});
  // end seed
  std::string url = listener->url("tcp") + "\n";
  (void)!::write(urlPipe, url.data(), url.size());
  ::close(urlPipe);
  // seed: "Accept join request and generate pipe"
  std::promise<std::shared_ptr<Pipe>> pipeProm;
  listener->accept([&](const Error& error, std::shared_ptr<Pipe> pipe) {
      if (error) {
          LOG(WARNING) << error.what();
      }
      pipeProm.set_value(std::move(pipe));
  });
  std::shared_ptr<Pipe> pipe = pipeProm.get_future().get();
  // end seed
  if (!pipe) return 1;
  std::promise<std::string> received;
  // seed: "Read and Write" (the read)
  pipe->readDescriptor(
        [&](const Error& error, Descriptor descriptor) {
          // Descriptor contains metadata of the message, the data size of each payload, the device information of tensors and other metadatas other than the real buffer
          // User should allocate the proper memory based on the descriptor, and set back the allocated memory to Allocation object
          Allocation allocation;
          // Then call pipe->read to ask pipe to receive the real buffer into allocations
          pipe->read(allocation, [&, descriptor](const Error& error) {
            received.set_value(error ? "error: " + error.what() : descriptor.metadata);
          });
        });
  // end seed (the callbacks capture by reference here to report back)
  std::string metadata = received.get_future().get();
  LOG(INFO) << "receiver got a message with metadata '" << metadata << "' over "
            << pipe->info().transport << " / " << pipe->info().channels["cpu"] << "\n";
  return metadata == "dglconnect" ? 0 : 1;
}

int sender(const std::string& addr) {
  auto context = makeContext();
  std::shared_ptr<Pipe> pipe;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // seed: "For Sender"
    pipe = context->connect(addr);
    // Note that the pipe may not be really available at this point
    // For example if no listener listening the address, there won't be error raised
    // The error will happen at the write/read operation. Thus we need to manually check this
    std::promise<bool> done;
    tensorpipe::Message tpmsg;
    tpmsg.metadata = "dglconnect";
    pipe->write(tpmsg, [&done](const tensorpipe::Error& error) {
        if (error) {
            done.set_value(false);
        } else {
            done.set_value(true);
        }
    });
    if (done.get_future().get()) {
        break;
    } else {
        sleep(5);
        LOG(INFO) << "Cannot connect to remove server. Wait to retry";
    }
    // end seed
  }
  // A write's callback means our side sent it; a clean exit waits for the
  // receiver to hang up once it has read.
  std::promise<void> closed;
  pipe->readDescriptor([&](const Error&, Descriptor) { closed.set_value(); });
  closed.get_future().wait();
  return 0;
}

}  // namespace

int main() {
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::_exit(receiver(fds[1]));
  }
  ::close(fds[1]);
  std::string url;
  char c;
  while (::read(fds[0], &c, 1) == 1 && c != '\n') url += c;
  ::close(fds[0]);
  int rc = sender(url);
  int status = 0;
  ::waitpid(pid, &status, 0);
  bool ok = rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("tensorpipe_intro: %s\n", ok ? "the receiver got the sender's message" : "FAILED");
  return ok ? 0 : 1;
}
