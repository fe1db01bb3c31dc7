// Redis Cluster hash slots: which of the 16384 slots a key belongs to, the rule every cluster
// node applies (CRC16-XMODEM of the key, or of its hash tag, modulo 16384). A hash tag is the
// part between the first '{' and the first '}' after it, when not empty: keys sharing one
// ("dg:{t:acme}:bucket", "dg:{t:acme}:quota") share a slot, so one script may touch them all.
#pragma once

#include <cstdint>
#include <string_view>

namespace dripgate::control {

inline constexpr int kClusterSlots = 16384;

// CRC16-XMODEM (polynomial 0x1021, initial value 0), as Redis's crc16.c.
uint16_t crc16(std::string_view data);

// The part of `key` that is hashed: its hash tag, or the whole key.
std::string_view hash_tag(std::string_view key);

// The slot of `key`, 0..16383.
int hash_slot(std::string_view key);

}  // namespace dripgate::control
