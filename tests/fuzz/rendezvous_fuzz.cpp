// Fuzz target: the rendezvous wire parser, dist::detail::parse_rendezvous_message
// (src/dist/rendezvous_message.h), which reads whatever connects to MASTER_PORT (rank 0) or
// answers on it (the other ranks).
//
// Input: byte 0 picks the message kind (even: a hello, odd: a reply), the rest is the bytes
// received. The parser must never throw or read outside them, and its verdicts must be those of
// a stream read: a complete message is also complete when exactly its bytes are given, and
// every shorter prefix of it is incomplete, asking for more bytes than it holds; an incomplete
// verdict asks for more than was given. Encoded messages parse back to their fields, and
// printable_prefix writes printable ASCII only.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "dist/rendezvous.h"
#include "dist/rendezvous_message.h"
#include "fuzz_util.h"

namespace {

using stoker::dist::detail::parse_rendezvous_message;
using stoker::dist::detail::RendezvousMessage;
using stoker::dist::detail::RendezvousMessageKind;
using Status = RendezvousMessage::Status;

bool same_fields(const RendezvousMessage& a, const RendezvousMessage& b) {
  return a.status == b.status && a.size == b.size && a.version == b.version &&
         a.purpose == b.purpose && a.rank == b.rank && a.world_size == b.world_size &&
         a.reply_status == b.reply_status && a.payload.size() == b.payload.size() &&
         std::equal(a.payload.begin(), a.payload.end(), b.payload.begin());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto kind = data[0] % 2 == 0 ? RendezvousMessageKind::hello : RendezvousMessageKind::reply;
  const bool hello = kind == RendezvousMessageKind::hello;
  const std::span<const uint8_t> bytes(data + 1, size - 1);

  const RendezvousMessage m = parse_rendezvous_message(bytes, kind);
  switch (m.status) {
    case Status::invalid:
      STOKER_FUZZ_EXPECT(!m.error.empty(), "invalid without a reason");
      break;
    case Status::incomplete:
      STOKER_FUZZ_EXPECT(m.size > bytes.size(), "incomplete, but asks for no more bytes");
      STOKER_FUZZ_EXPECT(
          m.size <= stoker::dist::detail::kReplyHeaderBytes + stoker::dist::kRendezvousMaxPayload,
          "incomplete, asking for " + std::to_string(m.size) + " bytes");
      break;
    case Status::complete: {
      STOKER_FUZZ_EXPECT(m.size <= bytes.size(), "complete, but longer than the bytes given");
      STOKER_FUZZ_EXPECT(m.size >= (hello ? stoker::dist::detail::kHelloBytes
                                          : stoker::dist::detail::kReplyHeaderBytes),
                         "complete, but shorter than its header");
      if (hello) STOKER_FUZZ_EXPECT(m.size == stoker::dist::detail::kHelloBytes, "hello size");
      if (!m.payload.empty()) {
        STOKER_FUZZ_EXPECT(m.payload.data() >= bytes.data() &&
                               m.payload.data() + m.payload.size() <= bytes.data() + m.size,
                           "the payload does not lie inside the message");
      }
      if (!hello && m.version == stoker::dist::kRendezvousVersion)
        STOKER_FUZZ_EXPECT(m.reply_status <= 1,
                           "accepted reply status " + std::to_string(m.reply_status));
      // Exactly the message's bytes: the same message.
      const RendezvousMessage exact = parse_rendezvous_message(bytes.first(m.size), kind);
      STOKER_FUZZ_EXPECT(same_fields(exact, m),
                         "the message parses differently without the "
                         "bytes after it");
      // Every prefix of it: incomplete, never invalid (checked on the first 64 and the last).
      for (size_t n = 0; n < m.size; n = n < 64 ? n + 1 : std::max(n + 1, m.size - 1)) {
        const RendezvousMessage p = parse_rendezvous_message(bytes.first(n), kind);
        STOKER_FUZZ_EXPECT(p.status == Status::incomplete && p.size > n && p.size <= m.size,
                           "a " + std::to_string(n) + "-byte prefix of a complete " +
                               std::to_string(m.size) + "-byte message is not incomplete");
      }
      break;
    }
  }

  // Encoders and parser agree, for the fields this input would hold.
  if (m.status == Status::complete && hello) {
    const auto h = stoker::dist::detail::encode_rendezvous_hello(m.purpose, m.rank, m.world_size);
    const RendezvousMessage e = parse_rendezvous_message(h, RendezvousMessageKind::hello);
    STOKER_FUZZ_EXPECT(
        e.status == Status::complete && e.version == stoker::dist::kRendezvousVersion &&
            e.purpose == m.purpose && e.rank == m.rank && e.world_size == m.world_size,
        "an encoded hello parses to other fields");
  }
  if (m.status == Status::complete && !hello && m.version == stoker::dist::kRendezvousVersion) {
    const auto h = stoker::dist::detail::encode_rendezvous_reply_header(
        m.reply_status, static_cast<uint32_t>(m.payload.size()));
    std::string wire(h.begin(), h.end());
    wire.append(m.payload.begin(), m.payload.end());
    const RendezvousMessage e = parse_rendezvous_message(
        std::span(reinterpret_cast<const uint8_t*>(wire.data()), wire.size()),
        RendezvousMessageKind::reply);
    STOKER_FUZZ_EXPECT(same_fields(e, m), "an encoded reply parses to other fields");
  }

  const std::string shown = stoker::dist::detail::printable_prefix(bytes, 24);
  for (char c : shown) {
    STOKER_FUZZ_EXPECT(c >= 0x20 && c < 0x7f, "printable_prefix wrote a control byte");
  }
  STOKER_FUZZ_EXPECT(shown.size() <= 2 + 4 * 24 + 3, "printable_prefix wrote too much");
  return 0;
}
