// Sends one message to itself through an installed actorpipe.
#include <cstdio>
#include <future>
#include <string>

#include <actorpipe/compat/tensorpipe.h>

int main() {
  auto context = std::make_shared<tensorpipe::Context>();
  context->registerTransport(0, "tcp", tensorpipe::transport::uv::create());
  context->registerChannel(0, "basic", tensorpipe::channel::basic::create());
  auto listener = context->listen({"tcp://127.0.0.1:0"});
  std::promise<std::shared_ptr<tensorpipe::Pipe>> accepted;
  listener->accept([&](const tensorpipe::Error& e, std::shared_ptr<tensorpipe::Pipe> p) {
    accepted.set_value(e ? nullptr : p);
  });
  auto client = context->connect(listener->url("tcp"));
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
