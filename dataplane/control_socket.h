// The dataplane's control socket: a unix stream socket (mode 0600) served on the main lcore with
// poll(), one JSON object per line in each direction, several clients at once. The protocol
// logic lives in the handler; this class only frames lines and never lets a client's bytes
// crash or block the process, and no client, or set of clients, can keep others out: a client
// that sends nothing for idle_timeout is closed, and when every slot is taken a new client
// replaces the one idle longest.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_reader.h"
#include "dataplane/mailbox.h"

namespace dripgate::dataplane {

class FlowTable;
class Scheduler;
class TenantTable;
struct Stats;

struct ControlSocketOptions {
  using Clock = std::chrono::steady_clock;
  // A client that has exchanged nothing (no byte received or sent) for this long is closed.
  // dripgate-control's client reconnects on its next call, so closing it costs one connect.
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(30);
  // Clients served at once; also the listen backlog, so a burst of that many connects all
  // reach accept().
  size_t max_clients = 64;
  // The group that may connect besides the owner (the socket's file 0660), else none (0600).
  std::optional<gid_t> group;
  Clock::time_point (*now)() = Clock::now;  // injected by tests
};

// dataplane.control_socket_group as a group id: none when empty, a number as it is, a name as
// the machine's group database has it (throws naming the field when it has none).
std::optional<gid_t> socket_group(const std::string& group);

class ControlSocket {
 public:
  // Called with each request line, read flat (an object, no key repeated within an object; the
  // body is JsonReader::kBody); appends the answer object's JSON text to `out` (no newline).
  // Throwing std::exception turns into {"ok":false,"error":what()}, whatever it had appended.
  // Text rather than a tree: the answers to tags, made at admission rate, are written flat.
  using Handler = std::function<void(const JsonReader&, std::string& out)>;
  // Answers a line it recognises without the reader, appending the answer's text (as Handler)
  // and returning true; false leaves the line to the reader and the Handler, and must not have
  // changed anything they would see. The tag lines dripgate-control writes, at admission rate,
  // are read this way (make_tag_fast_path).
  using FastPath = std::function<bool(std::string_view line, std::string& out)>;
  // Appends j to out as a Handler's answer (invalid UTF-8 echoed from a client replaced).
  static void append_json(const nlohmann::json& j, std::string& out);

  static constexpr size_t kMaxLine = 64 * 1024;
  // Answers waiting for a client to read them: past this, its further lines are not read (it
  // gets backpressure, not a disconnection).
  static constexpr size_t kMaxPendingOut = 1 << 20;

  // Binds and listens; throws std::runtime_error when the path is taken by a live dataplane or
  // cannot be created. A stale socket file left by a dead process is replaced.
  ControlSocket(std::string path, Handler handler, ControlSocketOptions options = {},
                FastPath fast = {});
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  // Waits up to timeout_ms for activity, serves it, closes idle clients, and returns true when
  // wake_fd (if >= 0) became readable.
  bool poll_once(int timeout_ms, int wake_fd) { return poll_once(timeout_ms, {wake_fd}) != 0; }
  // The same with up to 32 wake descriptors (negative ones ignored): bit i of the result is set
  // when wake_fds[i] became readable.
  uint32_t poll_once(int timeout_ms, std::initializer_list<int> wake_fds);
  size_t clients() const { return clients_.size(); }
  const std::string& path() const { return path_; }

  // Answers one line as the socket would: by `fast` when it takes the line, else reading it with
  // `reader` (reused from line to line: no tree, and no allocation for the reading once warm).
  // The other forms, for tests, have no fast path and use a new reader.
  static void answer_line(std::string_view line, const Handler& handler, const FastPath& fast,
                          JsonReader& reader, std::string& out);  // appends answer and newline
  static std::string answer_line(std::string_view line, const Handler& handler, JsonReader& reader);
  static std::string answer_line(std::string_view line, const Handler& handler);

 private:
  struct Client {
    int fd;
    ControlSocketOptions::Clock::time_point last_active;  // last byte received or sent
    std::string in, out;
    bool closing = false;
  };
  void accept_clients();
  void close_idle_clients();
  void evict_longest_idle();
  void answer_lines(Client& c);  // the complete lines in c.in, while answers may pile up
  bool read_client(Client& c);   // false: close it
  bool flush_client(Client& c);  // false: close it

  std::string path_;
  Handler handler_;
  ControlSocketOptions options_;
  FastPath fast_;
  JsonReader reader_;  // reads every client's lines, one at a time on this thread
  int listen_fd_ = -1;
  std::vector<Client> clients_;
  std::vector<pollfd> fds_;  // poll()'s set, rebuilt on every call
};

// The dataplane protocol: tag, untag, set_rate, stats (docs/ARCHITECTURE.md, The control
// socket). Everything it touches is either safe from the main lcore (flow table writes; reads
// of stats and of the scheduler's class names and rates) or goes to the drip lcore through the
// mailbox (rate changes).
struct ControlTargets {
  FlowTable* flows;
  Stats* stats;
  DripMailbox* mailbox;
  const Scheduler* sched;  // class names and the rates in force (read only)
  uint64_t (*now)();       // TSC for flow-table timestamps
  // A tag's "tenant" interned into the id its flows carry (the main lcore is its one writer);
  // null: tags are checked as usual and their flows carry no tenant.
  TenantTable* tenants = nullptr;
};
ControlSocket::Handler make_protocol(ControlTargets t);
// The tag lines dripgate-control writes ({"op":"tag","class":…,"ttl_s":…[,"tenant":…],
// "flows":[{"src","sport","dst","dport","proto"},…]} or "flow":{…}, compact, numbers as plain
// integers, strings without escapes) scanned in one pass and tagged as make_protocol's handler
// would, with the same answer. Anything else, and any line it would refuse, is left to the handler,
// which then names what is wrong.
ControlSocket::FastPath make_tag_fast_path(ControlTargets t);

}  // namespace dripgate::dataplane
