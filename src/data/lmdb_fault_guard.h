// Private: running LMDB read calls so that a damaged page can never end the process.
//
// Why: LMDB is a B-tree read straight from the memory map of data.mdb, and it trusts its pages.
// A page number is checked against the pages in use, but the counts, offsets and sizes inside a
// page are not: one damaged byte in a page header or a node sends LMDB to an address past the
// end of the file (SIGBUS), outside the map (SIGSEGV), into a division by zero (SIGFPE: a page
// size of 0 from a damaged meta page), or into one of its own assertions (which abort()). None of
// these comes back as an error code. So every LMDB call of the readers runs under this guard: a
// SIGSEGV, SIGBUS or SIGFPE raised by the kernel in the calling thread while it is inside a guarded
// call, or an LMDB assertion there, jumps back out of LMDB and the call reports the fault instead.
// A damaged page can also make LMDB loop forever (a binary search over a node count computed from a
// damaged header): a guarded call is stopped the same way after 50 ms of the thread's CPU time (a
// timer of the thread's CPU clock raising SIGRTMIN + 7), far more than any lookup takes. The caller
// then treats the database (or the record) as damaged and renews its read transaction.
//
// Scope: the signal handler is installed once per process, on first use. A fault outside a
// guarded call, in another thread, or raised with kill() is not ours: it goes to the handler
// that was there before (a sanitizer's, a crash reporter's) or, when there was none, kills the
// process as it would have without the guard. A handler installed after ours that does not
// chain to it disables the guard.
//
// Thread-safety: the guard is per thread (a guarded call arms only its own thread).
#pragma once

#include <string>

struct MDB_env;

namespace stoker::data::detail {

// Runs fn(arg). Returns true when it returned; false when a SIGSEGV/SIGBUS/SIGFPE or an LMDB
// assertion interrupted it, or it ran for 50 ms of CPU time, with "SIGBUS (bus error) reading
// address 0x...", "LMDB assertion: ..." or "LMDB was stopped after 50 ms of CPU time ..." in *why
// (when not null). fn must run C code only (LMDB calls): a fault jumps over its frames without
// running destructors, and leaves whatever it was doing half done.
bool run_lmdb_guarded(void (*fn)(void*), void* arg, std::string* why);

// run_lmdb_guarded for a callable; the same rules apply to what `fn` runs.
template <typename F>
bool lmdb_guarded(F& fn, std::string* why) {
  return run_lmdb_guarded([](void* f) { (*static_cast<F*>(f))(); }, &fn, why);
}

// Makes an assertion of LMDB on `env` jump out of a guarded call (outside one it prints the
// assertion and aborts, as LMDB does). Call right after mdb_env_create.
void guard_lmdb_assertions(MDB_env* env);

}  // namespace stoker::data::detail
