#include "dist/rendezvous_message.h"

#include <algorithm>
#include <cstdio>

#include "dist/rendezvous.h"

namespace stoker::dist::detail {

namespace {

constexpr uint8_t kMagicBytes[4] = {'S', 'T', 'K', 'R'};
static_assert(kRendezvousMagic ==
              (uint32_t{'S'} | uint32_t{'T'} << 8 | uint32_t{'K'} << 16 | uint32_t{'R'} << 24));

uint16_t u16_at(std::span<const uint8_t> b, size_t at) {
  return static_cast<uint16_t>(b[at] | (b[at + 1] << 8));
}
uint32_t u32_at(std::span<const uint8_t> b, size_t at) {
  return uint32_t{b[at]} | uint32_t{b[at + 1]} << 8 | uint32_t{b[at + 2]} << 16 |
         uint32_t{b[at + 3]} << 24;
}
void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

RendezvousMessage invalid(std::string why) {
  RendezvousMessage m;
  m.status = RendezvousMessage::Status::invalid;
  m.error = std::move(why);
  return m;
}

RendezvousMessage incomplete(size_t needed) {
  RendezvousMessage m;
  m.size = needed;
  return m;
}

}  // namespace

std::string printable_prefix(std::span<const uint8_t> bytes, size_t limit) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size() && i < limit; ++i) {
    const uint8_t c = bytes[i];
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  out += bytes.size() > limit ? "\"..." : "\"";
  return out;
}

RendezvousMessage parse_rendezvous_message(std::span<const uint8_t> bytes,
                                           RendezvousMessageKind kind) {
  const bool hello = kind == RendezvousMessageKind::hello;
  const char* what = hello ? "greeting" : "answer";
  // The magic first, byte by byte: the first wrong byte settles it.
  const size_t have = std::min<size_t>(bytes.size(), 4);
  if (!std::equal(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(have), kMagicBytes))
    return invalid(std::string("its ") + what + " starts with " + printable_prefix(bytes) +
                   " instead of the magic \"STKR\"");
  const size_t header = hello ? kHelloBytes : kReplyHeaderBytes;
  if (bytes.size() < header) return incomplete(header);

  RendezvousMessage m;
  m.version = u16_at(bytes, 4);
  if (hello) {
    m.purpose = u16_at(bytes, 6);
    m.rank = static_cast<int32_t>(u32_at(bytes, 8));
    m.world_size = static_cast<int32_t>(u32_at(bytes, 12));
    m.status = RendezvousMessage::Status::complete;
    m.size = kHelloBytes;
    return m;
  }
  m.reply_status = u16_at(bytes, 6);
  if (m.version != kRendezvousVersion) {  // another layout: the caller reports the version
    m.status = RendezvousMessage::Status::complete;
    m.size = kReplyHeaderBytes;
    return m;
  }
  if (m.reply_status > 1)
    return invalid("its answer has status " + std::to_string(m.reply_status) +
                   ", neither 0 (ok) nor 1 (refused)");
  const uint32_t length = u32_at(bytes, 8);
  if (length > kRendezvousMaxPayload)
    return invalid("its answer announces " + std::to_string(length) + " bytes (at most " +
                   std::to_string(kRendezvousMaxPayload) + " allowed): a corrupt answer");
  const size_t total = kReplyHeaderBytes + length;
  if (bytes.size() < total) return incomplete(total);
  m.payload = bytes.subspan(kReplyHeaderBytes, length);
  m.status = RendezvousMessage::Status::complete;
  m.size = total;
  return m;
}

std::array<uint8_t, kHelloBytes> encode_rendezvous_hello(uint16_t purpose, int32_t rank,
                                                         int32_t world_size) {
  std::array<uint8_t, kHelloBytes> h{};
  put32(h.data(), kRendezvousMagic);
  put16(h.data() + 4, kRendezvousVersion);
  put16(h.data() + 6, purpose);
  put32(h.data() + 8, static_cast<uint32_t>(rank));
  put32(h.data() + 12, static_cast<uint32_t>(world_size));
  return h;  // reserved: 0
}

std::array<uint8_t, kReplyHeaderBytes> encode_rendezvous_reply_header(uint16_t status,
                                                                      uint32_t length) {
  std::array<uint8_t, kReplyHeaderBytes> h{};
  put32(h.data(), kRendezvousMagic);
  put16(h.data() + 4, kRendezvousVersion);
  put16(h.data() + 6, status);
  put32(h.data() + 8, length);
  return h;
}

}  // namespace stoker::dist::detail
