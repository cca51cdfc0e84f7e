// The rendezvous wire format, private to src/dist: encoding, and parsing by a pure function
// that takes any bytes (a fuzz target calls it).
//
// Little-endian:
//   hello, peer -> rank 0 (20 bytes): magic u32 | version u16 | purpose u16 | rank u32 |
//                                     world_size u32 | reserved u32 (0)
//   reply, rank 0 -> peer (12 bytes + length): magic u32 | version u16 | status u16 (0 = ok,
//                                     1 = refused) | length u32 | payload, or the reason when
//                                     refused (length <= kRendezvousMaxPayload)
// The magic is the bytes "STKR". Rank 0 answers only once every rank has joined, so a reply also
// means "everybody is here".
//
// parse_rendezvous_message() says, from the bytes received so far, whether they are (the start
// of) a stoker message: `invalid` as soon as a byte shows they are not (the first byte of an
// HTTP request or a banner already does), `incomplete` with the size to wait for, or `complete`.
// It checks the structure only (magic, a reply's status and length); whether a peer's version,
// purpose, rank and world size fit the job is the rendezvous' decision. A reply of another
// protocol version is `complete` after its 12-byte header (its layout beyond that is unknown).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace stoker::dist::detail {

inline constexpr size_t kHelloBytes = 20;
inline constexpr size_t kReplyHeaderBytes = 12;

enum class RendezvousMessageKind : uint8_t { hello, reply };

struct RendezvousMessage {
  enum class Status : uint8_t { incomplete, complete, invalid };
  Status status = Status::incomplete;
  // complete: the bytes the message takes (any after it are not its); incomplete: the bytes
  // needed before it can be complete (more than given); invalid: 0.
  size_t size = 0;
  std::string error;  // invalid: why the bytes are not a stoker rendezvous message
  uint16_t version = 0;
  // hello
  uint16_t purpose = 0;
  int32_t rank = -1;
  int32_t world_size = -1;
  // reply
  uint16_t reply_status = 0;         // 0: ok, 1: refused (the payload is the reason)
  std::span<const uint8_t> payload;  // into the parsed bytes
};

RendezvousMessage parse_rendezvous_message(std::span<const uint8_t> bytes,
                                           RendezvousMessageKind kind);

std::array<uint8_t, kHelloBytes> encode_rendezvous_hello(uint16_t purpose, int32_t rank,
                                                         int32_t world_size);
std::array<uint8_t, kReplyHeaderBytes> encode_rendezvous_reply_header(uint16_t status,
                                                                      uint32_t length);

// Up to `limit` bytes as text for messages: printable ASCII as is, others as \xNN.
std::string printable_prefix(std::span<const uint8_t> bytes, size_t limit = 24);

}  // namespace stoker::dist::detail
