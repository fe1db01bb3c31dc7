// Client of the dataplane's control socket (unix stream, one JSON object per line each way),
// driven by one worker thread's libevent loop. Never blocks the loop: connects lazily (a unix
// connect completes or fails at once), and when the dataplane is absent every call completes
// with "unavailable" so admission goes on without it. The tags asked for during one pass of the
// loop leave as one line per class, ttl and tenant ({"op":"tag","flows":[...]}), so a burst of
// admissions costs the dataplane one request, not one per flow. Lines are written flat into a
// buffer the client keeps, and answers read flat (JsonReader), so tagging at admission rate
// allocates nothing per flow once the client is warm.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "control/admission/admission.h"

struct event_base;
struct bufferevent;
struct event;

namespace dripgate::control {

class Metrics;

class DataplaneClient {
 public:
  // result: "ok" | "error" (the dataplane said no) | "unavailable" (no socket / connection lost)
  // | "timeout" (no answer within timeout_ms).
  using Done = std::function<void(const std::string& result)>;

  DataplaneClient(event_base* base, std::string socket_path, Metrics* metrics,
                  int timeout_ms = 100);
  ~DataplaneClient();
  DataplaneClient(const DataplaneClient&) = delete;
  DataplaneClient& operator=(const DataplaneClient&) = delete;

  // `done` may run before these return (when the dataplane is unavailable). tenant: the admitted
  // tenant the flow is fair to in the dataplane (an id; empty: none).
  void tag(const Flow& flow, const std::string& cls, int ttl_s, std::string_view tenant, Done done);
  // Flows per tag line at most: well inside the dataplane's 64 KiB line.
  static constexpr size_t kMaxBatch = 256;
  void untag(const Flow& flow, Done done);
  bool connected() const { return bev_ != nullptr; }

 private:
  struct Pending {
    const char* op;           // "tag" | "untag"
    std::vector<Done> dones;  // one per flow of the line
    std::chrono::steady_clock::time_point deadline;
  };
  // Tags waiting for the end of this pass of the loop, for one class, ttl and tenant. Kept after
  // it is sent, with its flows' strings, so the next pass's tags of that kind fill it in place.
  struct Batch {
    std::string cls;
    int ttl_s = 0;
    std::string tenant;
    size_t count = 0;         // flows[0..count) are this pass's
    std::vector<Flow> flows;  // may hold more, left from earlier passes
    std::vector<Done> dones;
  };
  // Sends line_ (one request, newline included).
  void send(const char* op, std::vector<Done> dones);
  void send_batch(size_t i);  // batches_[i]
  void send_batches();        // every batch that holds tags
  // A callback list of the pass, emptied but with its capacity (finished lines give theirs back).
  std::vector<Done> take_dones();
  static void on_flush(int fd, short what, void* arg);
  bool ensure_connected();
  void close_connection(const std::string& result_for_pending, const char* why);
  // The first `ok` flows of p succeeded, the others get `result`.
  void finish(Pending p, const std::string& result, size_t ok = 0);
  void arm_timer();
  static void on_read(bufferevent* bev, void* arg);
  static void on_event(bufferevent* bev, short what, void* arg);
  static void on_timer(int fd, short what, void* arg);

  event_base* base_;
  std::string path_;
  Metrics* metrics_;
  std::chrono::milliseconds timeout_;
  bufferevent* bev_ = nullptr;
  event* timer_ = nullptr;
  event* flush_ev_ = nullptr;
  std::vector<Batch> batches_;
  bool flush_armed_ = false;  // on_flush is due at the end of this pass
  std::deque<Pending> pending_;
  std::string line_;                      // the request being written, reused
  std::vector<std::vector<Done>> spare_;  // emptied callback lists, reused
  JsonReader reader_;                     // reads the answers, reused
  bool outage_logged_ = false;
  std::chrono::steady_clock::time_point next_attempt_{};
};

// What a flow was tagged with at admission: its class and tenant, so a stream charge can tag it
// again for as long as its lease was renewed.
struct AdmittedFlow {
  Flow flow;
  std::string cls;
  std::string tenant;
};

// request_id -> flow of admitted requests (with the class and tenant it was tagged with), so
// that a stream charge can renew the tag and release can untag. In process and bounded (oldest
// entries are forgotten first); shared by the worker threads of one daemon, so a charge or a
// release must reach the daemon that admitted the request for the renewal or the untag to
// happen (the dataplane's idle timeout and the tag's ttl_s clean up otherwise).
//
// A put comes with every admission that carries a flow, so the table allocates nothing once
// warm: entries live in one array (their strings keep their capacity when a slot is reused), in
// admission order on a list threaded through the array, found through an open-addressing index
// of slot numbers (linear probing, deletion by backward shift, no tombstones).
class AdmittedFlows {
 public:
  explicit AdmittedFlows(size_t capacity = 65536);
  // A request id already held keeps its place in the order and takes the new flow.
  void put(const std::string& request_id, const Flow& flow, std::string_view cls = {},
           std::string_view tenant = {});
  // The admitted flow of request_id, copied into *out (whose strings keep their capacity, so a
  // caller that reuses one allocates nothing once warm); false when it is not held.
  bool find(const std::string& request_id, AdmittedFlow* out) const;
  std::optional<Flow> take(const std::string& request_id);
  size_t size() const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Entry {
    std::string id;
    AdmittedFlow admitted;
    uint32_t hash = 0;
    uint32_t prev = kNone, next = kNone;  // admission order; a free entry's next is the free list
  };
  struct Slot {
    uint32_t entry = kNone;  // kNone: empty
    uint32_t hash = 0;       // the id's hash, compared before the id
  };
  static uint32_t hash_of(std::string_view id);
  // The index slot holding id, or the empty slot where it would go.
  size_t slot_of(std::string_view id, uint32_t hash) const;
  void erase_slot(size_t s);  // empties s and shifts back the entries probing past it
  void unlink(uint32_t e);    // out of the order, onto the free list
  void grow_index();

  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // grows up to capacity_, then slots are reused
  std::vector<Slot> index_;     // a power of two, at least twice the entries
  uint32_t oldest_ = kNone, newest_ = kNone, free_ = kNone;
  size_t size_ = 0;
};

}  // namespace dripgate::control
