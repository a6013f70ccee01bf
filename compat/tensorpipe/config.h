#pragma once
// TensorPipe's build configuration, as its users test it. Every backend
// below is compiled into actorpipe on every build; whether it works on this
// host is decided at run time (isViable(), and Context negotiation skips
// what is not viable): ibv without an RDMA device, cma where ptrace is
// forbidden.
#define TENSORPIPE_HAS_SHM_TRANSPORT 1
#define TENSORPIPE_HAS_IBV_TRANSPORT 1
#define TENSORPIPE_HAS_CMA_CHANNEL 1
