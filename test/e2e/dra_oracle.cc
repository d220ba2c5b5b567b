// The e2e scenarios' view of the DRA driver through the production code (dra/, topology/):
//   dra_oracle slices TYPE NODE_NAME [LNC [FORM]]
//       the ResourceSlices `toposched dra-plugin` publishes for a node of TYPE, one JSON object
//       per line (dra::ScopeFor, dra::LegalOffers, dra::BuildSlices; index order, no unhealthy
//       device, partitionable). FORM: auto (the default, --set-offers auto), sets
//       (--set-offers on) or cores (--core-offers): throughput.sh --dra publishes them for fake
//       nodes that have no kubelet, so kube-scheduler's allocator searches exactly what a real
//       node offers
//   dra_oracle legal
//       reads lines "TYPE DEVICE_IDS" (ids comma-separated) and answers each with "legal" or
//       "illegal": whether the devices are one legal set of TYPE (topology::LegalPlacements), the
//       project's own rule, for checking what kube-scheduler allocated
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "dra/offers.h"
#include "dra/slices.h"
#include "topology/catalog.h"

namespace {

using namespace toposched;

Result<topology::NodeShape> ShapeOf(const std::string& type_name, int lnc) {
  const topology::InstanceType* type = topology::Catalog::Embedded().Find(type_name);
  if (type == nullptr) return Error{"no instance type '" + type_name + "' in the embedded catalog"};
  return topology::NodeShape::Make(*type, lnc);
}

int Slices(const std::string& type, const std::string& node, int lnc, const std::string& form) {
  auto shape = ShapeOf(type, lnc);
  if (!shape.ok()) {
    std::fprintf(stderr, "%s\n", shape.error().c_str());
    return 2;
  }
  dra::NodeFacts facts;
  facts.node_name = node;
  // What a real node adds (and AWS's form keeps): the Neuron driver's version and the EC2
  // instance-topology labels; dra_bench.py's AWS form derives from these slices.
  facts.dra_driver_version = "0.1.0";
  facts.neuron_driver_version = "2.25.4.0";
  facts.network_node_layers = {"nn-1111111111111111a", "nn-2222222222222222b",
                               "nn-3333333333333333c"};
  if (form != "auto" && form != "sets" && form != "cores") {
    std::fprintf(stderr, "FORM '%s': expected auto, sets or cores\n", form.c_str());
    return 2;
  }
  const dra::OfferScope scope = dra::ScopeFor(
      *shape, form == "sets" ? dra::SetOffers::kOn : dra::SetOffers::kAuto, form == "cores");
  const auto ordered = dra::OrderForFirstFit(dra::LegalOffers(*shape, scope), *shape,
                                             topology::NodeUsage{}, nullptr);
  const dra::SliceOptions options{.partitionable = scope != dra::OfferScope::kWholeDevices,
                                  .generation = 1};
  for (const auto& slice : dra::BuildSlices(facts, *shape, ordered, options)) {
    std::printf("%s\n", slice.json.c_str());
  }
  return 0;
}

int Legal() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string type, list;
    in >> type >> list;
    auto shape = ShapeOf(type, 0);
    if (!shape.ok()) {
      std::fprintf(stderr, "%s\n", shape.error().c_str());
      return 2;
    }
    std::vector<int> ids;
    std::istringstream items(list);
    for (std::string id; std::getline(items, id, ',');) ids.push_back(std::atoi(id.c_str()));
    const bool legal = topology::CheckLegalSet(*shape, topology::Unit::kDevice, ids).empty();
    std::printf("%s\n", legal ? "legal" : "illegal");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "slices" && argc >= 4 && argc <= 6) {
    return Slices(argv[2], argv[3], argc >= 5 ? std::atoi(argv[4]) : 0,
                  argc == 6 ? argv[5] : "auto");
  }
  if (mode == "legal" && argc == 2) return Legal();
  std::fprintf(
      stderr,
      "usage: %s slices TYPE NODE_NAME [LNC [auto|sets|cores]] | %s legal < 'TYPE IDS' lines\n",
      argv[0], argv[0]);
  return 2;
}
