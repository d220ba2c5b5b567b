// The legality oracle: an independent model of the legal-set rules (docs/topology.md), written
// from the rules and not from the allocator's code, which tests check the allocator and the
// tracker against. It must never call the code under test (topology's Allocate, LegalPlacements,
// Placement::FromIds, CoresOf, ...): it only reads the node's shape and the catalog's rule.
#ifndef TOPOSCHED_TEST_SUPPORT_LEGALITY_ORACLE_H_
#define TOPOSCHED_TEST_SUPPORT_LEGALITY_ORACLE_H_

#include <string>
#include <vector>

#include "topology/allocator.h"

namespace toposched::testing {

// The devices a list of device ids names, or a list of core ids touches, counted directly.
topology::DeviceMask MaskOf(const std::vector<int>& devices);
topology::DeviceMask TouchedBy(const topology::NodeShape& shape, const std::vector<int>& cores);
// The devices with any of these cores.
topology::DeviceMask DevicesOfCores(const topology::NodeShape& shape,
                                    const topology::CoreBits& cores);
// The cores a placement's ids cover (a device covers all of its cores). REQUIRES: ids in range.
topology::CoreBits CoresCovered(const topology::NodeShape& shape, const topology::Placement& p);

// The torus core block, from the documented table: the smallest of {1, sizes..., all} devices
// whose cores hold n (the whole node under the other rules).
int CoreBlock(const topology::NodeShape& shape, int n);
// Is this set of devices legal for a request of its size?
bool LegalDeviceSet(const topology::NodeShape& shape, topology::DeviceMask set);
// Are these core ids legal for a request of their count?
bool LegalCoreSet(const topology::NodeShape& shape, const std::vector<int>& ids);
// Empty when the placement is legal for a request of its size on this shape (ids in range,
// ascending, its `devices` mask right, and the rule's set), else why not.
std::string WhyIllegal(const topology::NodeShape& shape, const topology::Placement& p);

}  // namespace toposched::testing

#endif  // TOPOSCHED_TEST_SUPPORT_LEGALITY_ORACLE_H_
