// The partition service as toposched sees it (a V-IPU-style API), an HTTP client for it, and the
// provisioning steps bind runs: create, wait until active, and remove until the service says the
// partition is gone. Every call may be slow; none of this runs under the tracker's lock.
#ifndef TOPOSCHED_PROVISION_SERVICE_H_
#define TOPOSCHED_PROVISION_SERVICE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/result.h"
#include "provision/partition.h"

namespace toposched::provision {

class PartitionService {
 public:
  virtual ~PartitionService() = default;
  // Asks for a partition of these ipus of the pool; it starts in state creating.
  virtual Status Create(const Partition& partition) = 0;
  // nullopt when the service does not know the name (it is gone).
  virtual Result<std::optional<Partition>> Get(const std::string& name) = 0;
  // Asks for removal; a name the service does not know is success.
  virtual Status Remove(const std::string& name) = 0;
  virtual Result<std::vector<Partition>> List() = 0;
};

// Where the real service is and how to authenticate (configuration, never hard-coded).
struct HttpServiceConfig {
  std::string url;                          // e.g. http://127.0.0.1:8191 (a path prefix is kept)
  std::string token;                        // sent as "Authorization: Bearer <token>" when set
  std::string ca_file;                      // https: trust this CA instead of the system's
  std::chrono::milliseconds timeout{5000};  // per request
};

// A PartitionService over HTTP+JSON (net::HttpClient). Thread-safe.
Result<std::unique_ptr<PartitionService>> MakeHttpService(const HttpServiceConfig& config);

struct ProvisionOptions {
  std::chrono::milliseconds create_timeout{20000};  // create until active, at most
  std::chrono::milliseconds poll_interval{250};
  std::chrono::milliseconds remove_timeout{5000};  // synchronous removal in a failed bind
};

// The steps, with the clock and sleep injected (tests run them on real but short timings).
class Provisioner {
 public:
  using Sleep = std::function<void(std::chrono::milliseconds)>;  // may return early

  Provisioner(PartitionService& service, ProvisionOptions options, NanoClock clock, Sleep sleep);

  // Creates the partition and polls until it is active. On failure, timeout or a garbled
  // answer: removes what may have been made (until gone, within remove_timeout) and returns the
  // reason; `left_behind` is set when the removal could not be confirmed in time.
  Status CreateAndWait(const Partition& want, bool* left_behind);
  // Asks for removal and polls until the service no longer knows the name, retrying failed
  // calls, for at most `budget`. Errors when it could not confirm the partition gone.
  Status RemoveAndWait(const std::string& name, std::chrono::milliseconds budget);

  PartitionService& service() { return service_; }
  const ProvisionOptions& options() const { return options_; }

 private:
  PartitionService& service_;
  const ProvisionOptions options_;
  NanoClock clock_;
  Sleep sleep_;
};

}  // namespace toposched::provision

#endif  // TOPOSCHED_PROVISION_SERVICE_H_
