// The CDI spec files of prepared claims, which are also the plugin's checkpoint: one file per
// claim, `<cdi-root>/neuron.aws.com-<claimUID>.json`, written atomically (a temp file renamed
// over it), holding one CDI device per allocated DRA device (`<claimUID>-<deviceName>`, its
// /dev/neuronN nodes) and the claim's env as the spec's top-level containerEdits. Annotations on
// the spec and its devices name the claim, the DRA devices and their requests, so a restarted
// plugin knows from the files alone which claims are prepared and which units they hold. The
// spec also records the instance type and LNC its names were read at and each device's physical
// cores, so a restart at another LNC never reads a name again under the new one.
//
// The checkpoint fails closed: a spec that cannot be read by name still holds whole devices —
// those its device nodes (or, for a file that is not JSON, its text) name, the whole node when it
// names none — until kubelet unprepares its claim uid or the file is removed.
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

// The claim a spec file of ours describes. Its devices' names are read at the LNC the spec
// records; a device whose name cannot be read there (another type or LNC, a hand edit, a core
// range in a spec without the LNC) holds its device nodes whole and says why in held_because.
// Errors when the file is not one of our specs (JSON, kind, claim uid or name).
Result<PreparedClaim> DecodeCdiSpec(std::string_view json, const topology::NodeShape& shape);

// The devices `text` names as /dev/neuronN (N below `devices`).
topology::DeviceMask DeviceNodesIn(std::string_view text, int devices);

// Writes the claim's spec file atomically (temp file in the same directory, fsync, rename).
Status WriteCdiSpec(const std::string& cdi_root, const PreparedClaim& claim);
// Removes it; a file that is not there is success.
Status RemoveCdiSpec(const std::string& cdi_root, std::string_view claim_uid);

struct Checkpoint {
  std::vector<PreparedClaim> claims;
  std::vector<std::string> removed_temp_files;
  // Spec files of ours not read back by name, with why and what they hold instead (left in
  // place; their claims are in `claims`, keyed by the uid in the file name).
  std::vector<std::string> problems;
};
// Reads `cdi_root` at start: removes our leftover temp files, reads our spec files back. A
// missing directory is created. Errors only when the directory cannot be read or created.
Result<Checkpoint> LoadCheckpoint(const std::string& cdi_root, const topology::NodeShape& shape);

}  // namespace toposched::draplugin

#endif  // TOPOSCHED_DRAPLUGIN_CDI_H_
