// Sends one message to itself through an installed actorpipe. Built twice:
// as actorpipe code (actorpipe::actorpipe, over tcp), and with
// TENSORPIPE_PATHS as TensorPipe code with its includes unchanged
// (actorpipe::tensorpipe, over shm).
#include <cstdio>
#include <future>
#include <string>

#ifdef TENSORPIPE_PATHS
#include <tensorpipe/config.h>
#include <tensorpipe/tensorpipe.h>
#if !TENSORPIPE_HAS_SHM_TRANSPORT || !TENSORPIPE_HAS_CMA_CHANNEL
#error "TensorPipe's configuration macros are missing"
#endif
const char* const kScheme = "shm";
#else
#include <actorpipe/compat/tensorpipe.h>
const char* const kScheme = "tcp";
#endif

int main() {
  auto context = std::make_shared<tensorpipe::Context>();
  context->registerTransport(0, "tcp", tensorpipe::transport::uv::create());
  context->registerTransport(10, "shm", tensorpipe::transport::shm::create());
  context->registerChannel(0, "basic", tensorpipe::channel::basic::create());
  context->registerChannel(10, "cma", tensorpipe::channel::cma::create());
  auto listener = context->listen({std::string(kScheme) == "shm" ? "shm://" : "tcp://127.0.0.1:0"});
  std::promise<std::shared_ptr<tensorpipe::Pipe>> accepted;
  listener->accept([&](const tensorpipe::Error& e, std::shared_ptr<tensorpipe::Pipe> p) {
    accepted.set_value(e ? nullptr : p);
  });
  auto client = context->connect(listener->url(kScheme));
  auto server = accepted.get_future().get();
  if (!server) return 1;
  std::string text = "hello from an installed actorpipe";
  tensorpipe::Message m;
  m.tensors.push_back({tensorpipe::CpuBuffer{&text[0]}, text.size(), tensorpipe::nullopt, ""});
  client->write(m, [](const tensorpipe::Error&) {});
  std::string got(text.size(), '\0');
  std::promise<bool> done;
  server->readDescriptor([&](const tensorpipe::Error& e, tensorpipe::Descriptor d) {
    if (e) return done.set_value(false);
    tensorpipe::Allocation a;
    a.tensors.push_back({tensorpipe::CpuBuffer{&got[0]}});
    server->read(a, [&](const tensorpipe::Error& e) { done.set_value(!e); });
  });
  bool ok = done.get_future().get() && got == text;
  std::printf("%s\n", ok ? got.c_str() : "FAILED");
  context->join();
  return ok ? 0 : 1;
}
