#pragma once
// Rendezvous: every rank learns every other rank's host and pipe URL.
//
// Rank 0 listens (on the rendezvous TCP address, or on an ephemeral port it
// then publishes in the rendezvous file, written to a temporary name and
// renamed, so a reader sees the whole address or nothing). Every other rank
// connects (retrying until its deadline: rank 0 may start last), says who
// it is, and waits for the table, which rank 0 sends once every rank has
// checked in. If some rank never does, rank 0 tells everyone who is missing,
// so every rank fails with the same clear RendezvousError.
//
// A hello, the table and a failure are RendezvousFrames (frames.h), decoded
// strictly; anything else that reaches rank 0 is dropped unanswered. Rank 0 fails the rendezvous at once, telling
// every rank that says hello (for a few seconds more, so late ranks hear it
// too), when a hello's world size differs from its own, or when a second
// process claims a rank whose first claimant is still connected: a stranger
// that says it is rank r makes the group fail, naming r, rather than take
// r's place. (With a secret, TreeOptions::secret, strangers get no pipe at
// all.) A claimant whose pipe broke may be replaced: that is how ranks retry.
#include <chrono>
#include <string>
#include <vector>

#include <actorpipe/actors/group/environment.h>
#include <actorpipe/actors/group/frames.h>
#include <actorpipe/runtime/context.h>

namespace actorpipe::group {

Error rendezvous(Context& context, const RankInfo& me, const std::string& myUrl,
                 std::chrono::milliseconds timeout, std::vector<Member>& table);

// Removes rank 0's rendezvous file, if the rendezvous used one.
void removeRendezvousFile(const RankInfo& me);

} // namespace actorpipe::group
