// Package memory is lockproxy's embedded backend and the reference for the
// lock model (docs/architecture.md): every other backend must answer the
// conformance suite (backend/backendtest) the way this one does.
//
// Guarantees:
//   - every command is atomic; a script is atomic over every key it touches,
//     declared in KEYS or not, in any database it SELECTs, and, as in
//     Redis 7, sees the clock stand still at its start (a key live when it
//     starts cannot expire between its GET and its PEXPIRE); a script
//     that lockproxy stops (its time limit or memory budget, its client
//     gone) leaves nothing it wrote or published: its writes are undone
//     from a journal (model.Journal) before anyone sees them, where Redis
//     would refuse to stop it; one that ends with an error keeps its
//     writes, as in Redis;
//   - a key is dead at its deadline to the millisecond (a read finds it
//     gone, a write finds it absent), however late the reaper is;
//   - expired keys are reclaimed in the background, Redis-style: a reaper
//     samples keys in every shard on each tick and repeats while more than a
//     quarter of a sample had expired, so memory follows the live keys under
//     acquire/expire churn, with bounded work per tick; a shard's map that
//     emptied after a peak is rebuilt smaller, since Go maps never shrink;
//   - databases 0 to 15 are separate key spaces;
//   - every grant gets a fencing token greater than every earlier one of
//     its key, also across restarts of the process, as long as the clock
//     does not step back over one (docs/fencing.md).
//
// The rules are package model's: a shard is a model.Space behind a mutex,
// and a script or a multi-key command runs on a model.View over every
// shard's space, its clock stopped at its start. What memory adds is the
// locking, the clock and the reaper's schedule.
//
// Concurrency: one RWMutex over the store and 64 shards with a mutex each.
// A single-key command takes the read side and its shard's mutex, so
// commands on different keys run in parallel and a check and its write
// happen in one critical section. Scripts and multi-key commands take the
// write side: they run alone, as in Redis. The price is that a slow script
// (up to the runner's time limit, default 5s) stalls every other command,
// which is also what Redis does.
//
// Nothing is persisted: the locks end with the process. This backend is a
// single node and not highly available; the proxy says so at start.
package memory
