// A fake V-IPU-style partition service for tests and demos: the logic behind
// `toposched partition-service` (which serves it over loopback HTTP). Partitions go from
// creating to active (or failed, at `failure_rate`) after `latency`, and from removing to gone
// after `remove_latency`. Overlapping ipus in one pool are refused with 409, as a real service
// would, so a scheduler bug that hands out one device twice shows up as a failed create.
#ifndef TOPOSCHED_PROVISION_FAKE_SERVICE_H_
#define TOPOSCHED_PROVISION_FAKE_SERVICE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/mutex.h"
#include "provision/partition.h"

namespace toposched::provision {

struct FakeServiceOptions {
  std::chrono::milliseconds latency{500};         // creating -> active/failed
  std::chrono::milliseconds remove_latency{200};  // removing -> gone
  double failure_rate = 0;                        // share of creates that end failed
  std::string token;                              // when set, required as a Bearer token
  uint64_t seed = 1;
};

struct FakeAnswer {
  int status = 200;
  std::string body;
};

class FakePartitionService {
 public:
  FakePartitionService(FakeServiceOptions options, NanoClock clock);

  // One HTTP request: method, target (path), body, Authorization header.
  FakeAnswer Handle(std::string_view method, std::string_view target, std::string_view body,
                    std::string_view authorization);

  // Test knobs.
  void SetGarbage(bool on);          // every answer is malformed JSON
  void SetFailureRate(double rate);  // for creates from now on
  void SetRemoveRefusals(int n);     // the next n removals answer 503
  void SetLostCreateAnswers(int n);  // the next n creates are made but answered 504
  void SetLatency(std::chrono::milliseconds latency);
  void SetRemoveLatency(std::chrono::milliseconds latency);
  // Every partition now (after advancing states), for assertions.
  std::vector<Partition> Snapshot();
  int creates() const;
  int requests() const;  // every Handle call, answered or refused: what a test waits on

 private:
  struct Entry {
    Partition partition;
    int64_t change_at = 0;  // when creating/removing ends
    bool will_fail = false;
  };
  void AdvanceLocked(int64_t now) TS_REQUIRES(mu_);
  int64_t Ns(std::chrono::milliseconds ms) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(ms).count();
  }

  FakeServiceOptions options_;
  NanoClock clock_;
  mutable Mutex mu_;
  std::map<std::string, Entry> entries_ TS_GUARDED_BY(mu_);
  std::mt19937_64 rng_ TS_GUARDED_BY(mu_);
  bool garbage_ TS_GUARDED_BY(mu_) = false;
  int remove_refusals_ TS_GUARDED_BY(mu_) = 0;
  int lost_create_answers_ TS_GUARDED_BY(mu_) = 0;
  int creates_ TS_GUARDED_BY(mu_) = 0;
  int requests_ TS_GUARDED_BY(mu_) = 0;
};

}  // namespace toposched::provision

#endif  // TOPOSCHED_PROVISION_FAKE_SERVICE_H_
