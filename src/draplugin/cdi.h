// The CDI spec files of prepared claims, which are also the plugin's checkpoint: one file per
// claim, `<cdi-root>/neuron.aws.com-<claimUID>.json`, written atomically (a temp file renamed
// over it), holding one CDI device per allocated DRA device (`<claimUID>-<deviceName>`, its
// /dev/neuronN nodes) and the claim's env as the spec's top-level containerEdits. Annotations on
// the spec and its devices name the claim, the DRA devices and their requests, so a restarted
// plugin knows from the files alone which claims are prepared and which units they hold.
#ifndef TOPOSCHED_DRAPLUGIN_CDI_H_
#define TOPOSCHED_DRAPLUGIN_CDI_H_

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "draplugin/prepare.h"

namespace toposched::draplugin {

// CDI spec version written: 0.6.0 is the first with annotations; containerd 2.x reads it.
inline constexpr std::string_view kCdiVersion = "0.6.0";

// A claim uid is used in file and CDI device names: letters, digits and '-' only.
Status CheckClaimUid(std::string_view uid);

std::string CdiSpecPath(const std::string& cdi_root, std::string_view claim_uid);
std::string CdiSpecJson(const PreparedClaim& claim);

// The claim a spec file of ours describes. The devices' offers are looked up on `shape`; a
// device that is no longer a legal name here (the node's LNC changed) is an error.
Result<PreparedClaim> DecodeCdiSpec(std::string_view json, const topology::NodeShape& shape);

// Writes the claim's spec file atomically (temp file in the same directory, fsync, rename).
Status WriteCdiSpec(const std::string& cdi_root, const PreparedClaim& claim);
// Removes it; a file that is not there is success.
Status RemoveCdiSpec(const std::string& cdi_root, std::string_view claim_uid);

struct Checkpoint {
  std::vector<PreparedClaim> claims;
  std::vector<std::string> removed_temp_files;
  // Spec files of ours that could not be read back, with why (left in place, holding nothing).
  std::vector<std::string> problems;
};
// Reads `cdi_root` at start: removes our leftover temp files, reads our spec files back. A
// missing directory is created. Errors only when the directory cannot be read or created.
Result<Checkpoint> LoadCheckpoint(const std::string& cdi_root, const topology::NodeShape& shape);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_CDI_H_
